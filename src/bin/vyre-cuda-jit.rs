//! `vyre-cuda-jit`: the JIT helper process. Point `VYRE_CUDA_JIT_HELPER` at this executable
//! and vyre-cuda compiles every PTX module here, through the CUDA driver's linker, and only
//! loads the resulting cubin in the application's process: a crash of NVIDIA's PTX compiler
//! then ends this helper, and the application gets an error for one dispatch instead of
//! dying. Install with `cargo install vyre-cuda --bin vyre-cuda-jit`.

fn main() {
    std::process::exit(vyre_cuda::backend::serve_jit_helper());
}
