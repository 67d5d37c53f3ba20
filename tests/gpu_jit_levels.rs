//! The driver JIT's optimisation level (`CudaOptions::jit_optimization_level`,
//! `VYRE_CUDA_JIT_OPT_LEVEL`): the setting parses from the environment (bad values are an
//! error with one `Fix:`), and on a GPU the fixture corpus compiled at the lowest levels
//! is byte-identical to vyre-reference, as at the default (`gpu_primitives`): the emitted
//! PTX fixes every rounding, so the level may change speed, never bits. One test function:
//! the shared backend reads the environment while it opens, so nothing may run while the
//! variable holds a bad value.

mod common;

use vyre_cuda::{CudaBackend, CudaOptions, JIT_OPTIMIZATION_LEVEL_ENV};

#[test]
fn jit_levels_parse_and_keep_the_bits() {
    the_level_comes_from_the_environment();
    the_corpus_is_byte_identical_at_the_lowest_levels();
}

fn the_level_comes_from_the_environment() {
    assert_eq!(
        CudaOptions::default().jit_optimization_level,
        None,
        "the driver's default level unless asked"
    );
    std::env::set_var(JIT_OPTIMIZATION_LEVEL_ENV, "2");
    let options = CudaOptions::from_env().expect("a level parses");
    assert_eq!(options.jit_optimization_level, Some(2));
    for bad in ["5", "fast", "-1"] {
        std::env::set_var(JIT_OPTIMIZATION_LEVEL_ENV, bad);
        let text = CudaOptions::from_env()
            .expect_err("a bad level is refused")
            .to_string();
        assert!(text.contains(JIT_OPTIMIZATION_LEVEL_ENV), "{text}");
        assert_eq!(text.matches("Fix:").count(), 1, "{text}");
    }
    std::env::remove_var(JIT_OPTIMIZATION_LEVEL_ENV);
    // Set directly, a level the driver does not know is refused before the device opens.
    let refused = CudaBackend::with_options(CudaOptions {
        jit_optimization_level: Some(5),
        ..CudaOptions::default()
    });
    let Err(error) = refused else {
        panic!("level 5 is refused")
    };
    let text = error.to_string();
    assert!(text.contains("jit_optimization_level"), "{text}");
    assert_eq!(text.matches("Fix:").count(), 1, "{text}");
}

fn the_corpus_is_byte_identical_at_the_lowest_levels() {
    for level in [0, 1] {
        let Some(backend) = common::gpu::fresh(CudaOptions {
            jit_optimization_level: Some(level),
            ..CudaOptions::default()
        }) else {
            return;
        };
        let run = common::gpu::run_fixture_corpus(&backend);
        println!(
            "JIT level {level}: {} fixture cases run, {} programs rejected, {} failing",
            run.cases,
            run.rejected,
            run.failures.len()
        );
        assert!(run.failures.is_empty(), "{}", run.failures.join("\n"));
        assert!(run.cases > 100, "too few fixture cases ran ({})", run.cases);
    }
}
