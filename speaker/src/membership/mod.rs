//! SWIM membership (placeholder).
