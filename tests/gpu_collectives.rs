//! GPU: vyre's collectives on one device through the backend. Each `CommGroup::WORLD`
//! collective (AllReduce, AllGather, ReduceScatter, root-0 Broadcast) dispatches and is
//! byte-identical to vyre-reference; one that needs a transport fails where the reference
//! fails, with one `Fix:` hint.

mod common;

use common::collective_programs::{transport_cases, world_cases};

#[test]
fn world_collectives_match_the_reference_byte_for_byte() {
    let Some(backend) = common::gpu::backend() else {
        return;
    };
    let cases = world_cases();
    for case in &cases {
        let want = common::gpu::reference(&case.program, &case.inputs)
            .unwrap_or_else(|e| panic!("{}: the reference fails: {e}", case.name));
        let got = backend
            .dispatch(&case.program, &case.inputs, &case.config)
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        assert_eq!(got, want, "{}", case.name);
    }
    println!("{} world collective cases match the reference", cases.len());
}

#[test]
fn collectives_that_need_a_transport_fail_as_in_the_reference() {
    let Some(backend) = common::gpu::backend() else {
        return;
    };
    for case in transport_cases() {
        assert!(
            common::gpu::reference(&case.program, &case.inputs).is_err(),
            "{}: the reference must reject it",
            case.name
        );
        let error = backend
            .dispatch(&case.program, &case.inputs, &case.config)
            .expect_err("the reference rejects it, so must the backend");
        let text = common::gpu::fix_text(error);
        assert!(text.contains("CommGroup::WORLD"), "{}: {text}", case.name);
    }
}
