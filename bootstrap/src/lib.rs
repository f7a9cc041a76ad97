//! ferrolb bootstrap: announces the apiserver VIP from a checkpointed config.
