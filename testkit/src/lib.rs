//! ferrolb's test kit, for tests only (no product crate depends on it outside its
//! dev-dependencies): bounded waits for async tests ([`wait`]); `ferrolb_fakeapi::wait`
//! re-exports them.

pub mod wait;
