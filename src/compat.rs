//! What differs between the vyre lines vyre-cuda serves: the identity under which it
//! registers, the shape of a resident handle, and vyre-driver's op ids. Everything else
//! (codegen, driver, backend) is line-agnostic; the 0.1.x line (vyre 0.6) keeps its own
//! copy of this module (see CHANGELOG.md).
//!
//! This is vyre **0.7.2**.

use vyre_driver::{BackendError, ResidentHandle, ResidentOwner, Resource};

/// Backend id under which vyre-cuda registers (`vyre_driver::backend::acquire`). Its own,
/// so that a binary that also links vyre-driver-cuda (id `"cuda"`) keeps a valid registry:
/// vyre 0.7 fails every registry call when two registrations share an id.
pub const BACKEND_ID: &str = "vyre-cuda";

/// Target id of the registration (vyre 0.7 also requires it to be unique).
pub const TARGET_ID: &str = "vyre-cuda";

/// Payload format of vyre-cuda's target payloads: PTX written by vyre-cuda's own emitter
/// (vyre-driver-cuda's `"ptx"` payloads come from another emitter and entry convention).
pub const PAYLOAD_FORMAT: &str = "vyre-cuda-ptx";

/// The op id vyre-driver's validator gives `Node::AsyncStore`.
pub const ASYNC_STORE_OP_ID: &str = "vyre.node.async_store";

/// The namespace of one backend instance's resident handles.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HandleNamespace(ResidentOwner);

/// Why a `Resource` is not a resident handle of this backend instance: "what went wrong",
/// "what to do".
pub(crate) type NotOurs = (String, &'static str);

impl HandleNamespace {
    pub(crate) fn new() -> Result<Self, BackendError> {
        ResidentOwner::new().map(Self)
    }

    /// The instance's owner number: unique per backend instance in this process.
    pub(crate) fn generation(self) -> u64 {
        self.0.get()
    }

    /// The `Resource::Resident` of resident-table handle `id`.
    pub(crate) fn resource(self, id: u64) -> Resource {
        Resource::Resident(self.0.handle(id))
    }

    /// The resident-table handle of a `Resource::Resident` minted by this instance; a
    /// handle of another instance or a `Resource::Borrowed` is an error.
    pub(crate) fn id(self, resource: &Resource) -> Result<u64, NotOurs> {
        match resource {
            Resource::Resident(handle) => self.own(*handle),
            Resource::Borrowed(bytes) => Err((
                format!(
                    "a Resource::Borrowed ({} bytes) was passed where a resident handle is required",
                    bytes.len()
                ),
                "pass the Resource::Resident returned by allocate_resident",
            )),
        }
    }

    fn own(self, handle: ResidentHandle) -> Result<u64, NotOurs> {
        if handle.owner() == self.0 {
            return Ok(handle.id());
        }
        Err((
            format!(
                "resident handle {handle} belongs to another backend instance (this backend is instance {})",
                self.0.get()
            ),
            "use a resident handle only with the backend that allocated it; allocate and \
             upload the buffer on this backend",
        ))
    }
}
