//! Reads the cluster facts that decisions are made from. Nothing here writes.
//!
//! Observing is reading through [`reads::Reads`] (the API, and first what the controller
//! knows from its watches), paged so that a list of many objects holds a page at a time
//! ([`paging`]), and keeping of each object only what a decision reads: the consumers
//! of claims ([`consumers`]), the workloads whose templates mount them ([`workloads`]),
//! refill's own pods ([`own_pods`]), replica counts ([`replicas`]), the GitOps objects
//! that manage consumers ([`managers`]) and the workloads labelled to be switched
//! ([`labelled`]).

pub(crate) mod consumers;
pub(crate) mod labelled;
pub(crate) mod managers;
pub(crate) mod own_pods;
pub(crate) mod paging;
pub(crate) mod reads;
pub(crate) mod replicas;
pub(crate) mod workloads;
