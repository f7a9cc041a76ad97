//! Tests of the BGP core: golden vectors, property tests, FSM pairs, RIB-Out packing,
//! and sessions over loopback.
mod codec;
mod fsm_pair;
mod machine;
mod rfc7606;
mod rib_out;
mod session;
