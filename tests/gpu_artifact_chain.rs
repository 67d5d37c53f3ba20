//! The artifact route on the GPU: a 16-node multi-group chain whose nodes read another
//! invocation's element of their input, checked against vyre-reference running the nodes
//! in order; the materialize time by module split; asynchronous submission; errors.

mod common;

use common::artifact::{fix_text, registration, request, reverse_chain, value_id};
use std::time::Instant;
use vyre_driver::{BindingSet, BoundResource};
use vyre_foundation::ir::{Program, ProgramGraph};
use vyre_megakernel::Artifact;

const N: u32 = 4096;

fn chain(len: u32, stores: u32) -> (ProgramGraph, Vec<Program>) {
    reverse_chain(len, N, stores)
}

fn compile(graph: ProgramGraph) -> Artifact {
    common::artifact::compile(&request(graph))
}

/// vyre-reference running the chain's nodes in order.
fn reference(programs: &[Program], input: &[u8]) -> Vec<u8> {
    programs.iter().fold(input.to_vec(), |value, program| {
        common::gpu::reference(program, &[value]).expect("the reference runs the node")[0].clone()
    })
}

#[test]
fn a_multi_group_chain_matches_the_reference_in_order_and_submits_asynchronously() {
    if common::gpu::backend().is_none() {
        return;
    }
    let (graph, programs) = chain(16, 1);
    let artifact = compile(graph);
    let started = Instant::now();
    let payload = registration()
        .target_compiler()
        .unwrap()
        .compile(&artifact)
        .unwrap();
    let compile_ms = started.elapsed().as_secs_f64() * 1e3;
    let materializer = registration().materializer().expect("a device");
    let started = Instant::now();
    let instance = materializer
        .materialize(&artifact, &payload)
        .expect("materializes");
    let materialize_ms = started.elapsed().as_secs_f64() * 1e3;
    println!(
        "16-node chain: {} fusion group(s), compile {compile_ms:.2} ms, materialize {materialize_ms:.2} ms",
        artifact.fusion().len()
    );
    assert!(artifact.fusion().len() > 1);
    let mut rng = common::gpu::Rng::new(16);
    let input = rng.bytes_u32(N as usize);
    let output_value = value_id(&artifact, "v16");
    let input_value = value_id(&artifact, "v0");
    let expected = reference(&programs, &input);
    let mut submit_us = Vec::new();
    for _ in 0..20 {
        let mut bindings = BindingSet::new(artifact.digest());
        bindings.insert(input_value, BoundResource::Host(input.clone()));
        let started = Instant::now();
        let completion = instance.submit(bindings).unwrap().wait().unwrap();
        submit_us.push(started.elapsed().as_secs_f64() * 1e6);
        assert_eq!(
            completion.outputs[&output_value], expected,
            "byte-identical to the reference"
        );
        assert!(completion.device_ns.is_some());
    }
    submit_us.sort_by(f64::total_cmp);
    println!(
        "warm submit+wait of the 16-node chain: median {:.1} us",
        submit_us[10]
    );

    // A missing input: an error naming it, and the instance still works afterwards.
    let error = instance
        .submit(BindingSet::new(artifact.digest()))
        .err()
        .expect("v0 unbound");
    let text = fix_text(error);
    assert!(text.contains("`v0`"), "{text}");
    let mut wrong = BindingSet::new(artifact.digest());
    wrong.insert(input_value, BoundResource::Host(vec![0; 12]));
    fix_text(instance.submit(wrong).err().expect("wrong length"));

    // Resident binding for the input, host readback of the output.
    let resident = materializer.allocate_resident(input.len()).unwrap();
    materializer.upload_resident(&resident, &input).unwrap();
    let mut bindings = BindingSet::new(artifact.digest());
    bindings.insert(input_value, BoundResource::Resident(resident.clone()));
    let completion = instance.submit(bindings).unwrap().wait().unwrap();
    assert_eq!(completion.outputs[&output_value], expected);
    materializer.free_resident(resident.clone()).unwrap();
    let mut bindings = BindingSet::new(artifact.digest());
    bindings.insert(input_value, BoundResource::Resident(resident));
    fix_text(instance.submit(bindings).err().expect("freed handle"));
}

#[test]
fn submit_returns_before_a_long_artifact_finishes() {
    if common::gpu::backend().is_none() {
        return;
    }
    // Each node stores the same value 2^16 times: long on the device, and the result is
    // the one-store chain's, which the reference computes quickly.
    let (graph, _) = chain(2, 1 << 16);
    let (_, programs) = chain(2, 1);
    let artifact = compile(graph);
    let payload = registration()
        .target_compiler()
        .unwrap()
        .compile(&artifact)
        .unwrap();
    let materializer = registration().materializer().unwrap();
    let instance = materializer.materialize(&artifact, &payload).unwrap();
    let input = common::gpu::Rng::new(2).bytes_u32(N as usize);
    let input_value = value_id(&artifact, "v0");
    let bind = || {
        let mut bindings = BindingSet::new(artifact.digest());
        bindings.insert(input_value, BoundResource::Host(input.clone()));
        bindings
    };
    let submission = instance.submit(bind()).unwrap();
    assert!(!submission.is_ready(), "submit enqueues and returns");
    let completion = submission.wait().unwrap();
    let output_value = value_id(&artifact, "v2");
    assert_eq!(
        completion.outputs[&output_value],
        reference(&programs, &input)
    );
    drop(instance.submit(bind()).unwrap());
    let again = instance.submit(bind()).unwrap().wait().unwrap();
    assert_eq!(
        again.outputs[&output_value],
        completion.outputs[&output_value]
    );
}

#[test]
fn materialize_time_by_module_split() {
    if common::gpu::backend().is_none() {
        return;
    }
    for len in [1u32, 4, 16] {
        let (graph, _) = chain(len, 1);
        let artifact = compile(graph);
        let payload = registration()
            .target_compiler()
            .unwrap()
            .compile(&artifact)
            .unwrap();
        for modules in [1usize, 4, 16] {
            if modules > len as usize && modules > 1 {
                continue;
            }
            std::env::set_var(vyre_cuda::ARTIFACT_MODULES_ENV, modules.to_string());
            let materializer = registration().materializer().unwrap();
            let started = Instant::now();
            let instance = materializer.materialize(&artifact, &payload).unwrap();
            let ms = started.elapsed().as_secs_f64() * 1e3;
            println!("materialize {len} kernel(s) as {modules} module(s): {ms:.2} ms");
            drop(instance);
        }
    }
    std::env::remove_var(vyre_cuda::ARTIFACT_MODULES_ENV);
}
