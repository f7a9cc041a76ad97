//! The `ferrolb-testbed` command's own part: the demo. The command (`src/main.rs`) puts
//! together the lab ([`ferrolb_lab`]), the real control plane ([`ferrolb_cluster`]), the
//! benches ([`ferrolb_bench`]) and the release tooling ([`ferrolb_release`]); the lab
//! tests of the whole product live beside it in `tests/`.

pub mod demo;
