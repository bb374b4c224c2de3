//! The cluster: where keys live ([`placement`], [`stripe`]), who is up and who leads each
//! stripe ([`view`], with the lease rule in [`lease`]), and recovery ([`recovery`]).

pub mod coord;
#[cfg(feature = "etcd")]
pub mod etcd;
pub mod lease;
pub mod placement;
pub mod recovery;
pub mod stripe;
pub mod view;
