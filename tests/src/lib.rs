//! The test harness: every cluster behaviour of enoki is proved against a real kube-apiserver
//! (plus etcd and kube-controller-manager) that `hack/testenv.sh` starts on 127.0.0.1.
//!
//! [`TestEnv::new`] gives each test a [`kube::Client`] and a fresh namespace `t-<random>`.
//! It **panics** — never skips — when the control plane is not there: a green run that
//! tested nothing would be a lie. The kubeconfig comes from `KUBECONFIG`, or from
//! `target/testenv/kubeconfig` (where `hack/testenv.sh up` writes it). [`invariants`] checks
//! a converged Composition from the API alone; chaos tests and e2e suites end with it.

mod audit;
pub mod browser;
mod cluster;
mod compose;
pub mod invariants;
mod process;
mod rbac;
mod registry;
mod wait;
pub mod wasm;

pub use audit::*;
pub use cluster::*;
pub use compose::*;
pub use process::*;
pub use rbac::*;
pub use registry::*;
pub use wait::*;

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, Config};
