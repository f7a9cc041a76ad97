//! ferrolb's user contract: the CRD types of API.md, their one validator, and the
//! YAML object-stream reader/writer used for static files and checkpoints.
