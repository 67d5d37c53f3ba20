//! Linking vyre-cuda registers backend id "cuda" with vyre's registry.

mod common;

use vyre_driver::backend::registered_backends;

#[test]
fn cuda_is_registered_by_linking_the_crate() {
    let ids: Vec<&str> = registered_backends().iter().map(|r| r.id).collect();
    assert!(ids.contains(&"cuda"), "registered backends: {ids:?}");
    assert_eq!(vyre_driver::backend::backend_precedence("cuda"), 5);
    assert!(vyre_driver::backend::backend_dispatches("cuda"));
}

#[test]
fn acquire_opens_the_device_or_explains_why_not() {
    match vyre_driver::backend::acquire("cuda") {
        Ok(backend) => {
            assert_eq!(backend.id(), "cuda");
            assert_eq!(backend.version(), env!("CARGO_PKG_VERSION"));
            assert!(backend.max_workgroup_size()[0] >= 1024);
        }
        Err(error) => {
            let text = error.to_string();
            assert!(text.contains("Fix:"), "{text}");
            if common::gpu::backend().is_some() {
                panic!("a device is present but acquire failed: {text}");
            }
        }
    }
}

#[test]
fn registered_dispatch_matches_the_reference() {
    let Some(_) = common::gpu::backend() else {
        return;
    };
    let backend = vyre_driver::backend::acquire("cuda").expect("acquire cuda");
    let case = &common::programs::u32_binops()[2];
    let want = common::gpu::reference(&case.program, &case.inputs).unwrap();
    assert_eq!(
        backend
            .dispatch(&case.program, &case.inputs, &case.config)
            .unwrap(),
        want
    );
}
