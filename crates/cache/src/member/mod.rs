//! A stripe member: the chunk store ([`store`]), its answers to peer requests ([`handler`]) and
//! the peer connections the event loop serves for it (`conn`).

pub(crate) mod conn;
pub mod handler;
pub mod store;
pub mod whole;
