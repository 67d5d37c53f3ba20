//! Helpers shared by the integration tests. Each test file includes them with `mod common;`
//! and compiles them separately, so items a given file does not use are `allow(dead_code)`.

pub mod artifact;
pub mod cluster;
pub mod collective_programs;
pub mod corpus;
pub mod extensions;
pub mod gpu;
pub mod grid_programs;
pub mod half_programs;
pub mod kernels;
pub mod loop_programs;
pub mod multirank;
pub mod programs;
pub mod ptxas;
pub mod ptxas_batch;
pub mod speculation_programs;
pub mod step_programs;
pub mod subgroup_programs;
pub mod typed_lane_programs;
pub mod vector_programs;
pub mod wide_programs;
