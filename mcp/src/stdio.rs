//! Starting stdio servers.
