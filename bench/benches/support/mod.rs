//! Setups shared by more than one benchmark target. Each target uses a
//! part of them, so the rest is dead code there.
#![allow(dead_code)]

pub(crate) mod ca;
pub(crate) mod inject;
pub(crate) mod mesh;
