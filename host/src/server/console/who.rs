//! [`Console`]: the signed-in tenant a request comes from, and [`Who`] for the page header.

use nexo_store::Tenant;

/// The signed-in tenant's name and the session's CSRF token, for the header.
pub(super) struct Who {
    pub(super) name: String,
    pub(super) csrf: String,
}

/// A request of a signed-in tenant; anyone else is sent to `/login`.
pub struct Console {
    pub(super) tenant: Tenant,
    pub(super) csrf: String,
    /// The SHA-256 of the session id: its sign-in's key in the store.
    pub(super) session: String,
    /// The id of the API key the session signed in with.
    pub(super) key: String,
}

impl Console {
    pub(super) fn who(&self) -> Who {
        Who { name: self.tenant.name.clone(), csrf: self.csrf.clone() }
    }
}
