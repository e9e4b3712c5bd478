//! [`ContainerConfig`]: the runtime, image, network, mounts and limits of a
//! container sandbox, as plain data with hardened defaults.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// The default working directory inside the container.
pub const DEFAULT_CWD: &str = "/workspace";

/// The default `--pids-limit`.
pub const DEFAULT_PIDS_LIMIT: u32 = 512;

/// Which container CLI drives the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Runtime {
    /// The `docker` CLI (or anything argv-compatible with it, through
    /// [`ContainerConfig::binary`]).
    #[default]
    Docker,
    /// The `podman` CLI, driven with the same flags as Docker's.
    Podman,
    /// Apple's `container` CLI. It is driven with Docker-shaped flags, which
    /// is unverified; reconnecting is refused.
    Apple,
}

impl Runtime {
    /// The executable searched for on `PATH`: `docker`, `podman` or `container`.
    pub fn binary_name(self) -> &'static str {
        match self {
            Runtime::Docker => "docker",
            Runtime::Podman => "podman",
            Runtime::Apple => "container",
        }
    }

    pub(crate) fn title(self) -> &'static str {
        match self {
            Runtime::Docker => "Docker",
            Runtime::Podman => "Podman",
            Runtime::Apple => "Apple container",
        }
    }

    pub(crate) fn with_article(self) -> &'static str {
        match self {
            Runtime::Docker => "a Docker",
            Runtime::Podman => "a Podman",
            Runtime::Apple => "an Apple",
        }
    }

    pub(crate) fn install_hint(self) -> &'static str {
        match self {
            Runtime::Docker => "install Docker (https://docs.docker.com/engine/install/)",
            Runtime::Podman => "install Podman (on Debian or Ubuntu: apt-get install podman)",
            Runtime::Apple => "install Apple's container tool (https://github.com/apple/container)",
        }
    }
}

/// The container's network.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Network {
    /// No network at all (`--network none`). The default.
    #[default]
    None,
    /// The default bridge: outbound access (`--network bridge`).
    Bridge,
    /// The host's network stack (`--network host`).
    Host,
    /// A network created beforehand, by name.
    Named(String),
}

impl Network {
    pub(crate) fn as_arg(&self) -> &str {
        match self {
            Network::None => "none",
            Network::Bridge => "bridge",
            Network::Host => "host",
            Network::Named(name) => name,
        }
    }
}

/// A host directory mounted into the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    /// The absolute host path.
    pub host: PathBuf,
    /// The absolute path inside the container.
    pub container: String,
    /// Whether the container may write to it. Off by default: `-v host:container:ro`.
    pub writable: bool,
}

impl Bind {
    /// A read-only mount: `-v host:container:ro`.
    pub fn read_only(host: impl Into<PathBuf>, container: impl Into<String>) -> Self {
        Bind { host: host.into(), container: container.into(), writable: false }
    }

    /// A writable mount: `-v host:container:rw`.
    pub fn writable(host: impl Into<PathBuf>, container: impl Into<String>) -> Self {
        Bind { host: host.into(), container: container.into(), writable: true }
    }
}

/// How a [`ContainerSandbox`] runs its container. Plain data; every field
/// has a safe default, and [`ContainerConfig::docker`],
/// [`ContainerConfig::podman`] or [`ContainerConfig::apple`] set the one
/// field that has none, the image.
///
/// [`ContainerSandbox`]: crate::ContainerSandbox
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerConfig {
    /// Which CLI to drive. Default: Docker.
    pub runtime: Runtime,
    /// The CLI executable. Default: the runtime's CLI found on `PATH`.
    pub binary: Option<PathBuf>,
    /// The image to run. Required: there is no default image.
    pub image: String,
    /// The working directory inside the container, and the root the tools
    /// see. Default: `/workspace`.
    pub cwd: String,
    /// The sandbox name, stored as the `nexo.sandbox.id` label. Default:
    /// `nexo-<unique id>`; required for [`ContainerConfig::reconnect`].
    pub name: Option<String>,
    /// Reuse the container labeled with [`ContainerConfig::name`] and leave it
    /// running on close. Default: off (a fresh container, removed on close).
    pub reconnect: bool,
    /// The network. Default: [`Network::None`].
    pub network: Network,
    /// Capabilities added back after `--cap-drop ALL`. Default: none.
    pub cap_add: Vec<String>,
    /// A read-only root filesystem with a tmpfs scratch at `cwd`. Default: on.
    pub readonly_rootfs: bool,
    /// `--pids-limit`; `None` omits the flag. Default: 512.
    pub pids_limit: Option<u32>,
    /// `--memory` (for example `512m`). Default: unset.
    pub memory: Option<String>,
    /// `--cpus` (for example `1.5`). Default: unset.
    pub cpus: Option<String>,
    /// `--user` (a name or `uid:gid`). Default: unset, the image's user.
    pub user: Option<String>,
    /// Host directories to mount. Default: none.
    pub binds: Vec<Bind>,
    /// Environment variables, passed as one `-e KEY=value` each, in key order.
    pub env: BTreeMap<String, String>,
    /// The limit on starting the container (which may pull the image).
    /// Default: 5 minutes.
    pub start_timeout: Duration,
    /// The limit on each file operation and lookup. Default: 60 seconds.
    pub op_timeout: Duration,
}

impl Default for ContainerConfig {
    fn default() -> Self {
        ContainerConfig {
            runtime: Runtime::Docker,
            binary: None,
            image: String::new(),
            cwd: DEFAULT_CWD.to_string(),
            name: None,
            reconnect: false,
            network: Network::None,
            cap_add: Vec::new(),
            readonly_rootfs: true,
            pids_limit: Some(DEFAULT_PIDS_LIMIT),
            memory: None,
            cpus: None,
            user: None,
            binds: Vec::new(),
            env: BTreeMap::new(),
            start_timeout: Duration::from_secs(300),
            op_timeout: Duration::from_secs(60),
        }
    }
}

impl ContainerConfig {
    /// The hardened defaults with the Docker CLI and `image`.
    pub fn docker(image: impl Into<String>) -> Self {
        ContainerConfig { image: image.into(), ..Self::default() }
    }

    /// The hardened defaults with the Podman CLI and `image`.
    pub fn podman(image: impl Into<String>) -> Self {
        ContainerConfig { runtime: Runtime::Podman, image: image.into(), ..Self::default() }
    }

    /// The hardened defaults with Apple's `container` CLI and `image`.
    pub fn apple(image: impl Into<String>) -> Self {
        ContainerConfig { runtime: Runtime::Apple, image: image.into(), ..Self::default() }
    }
}
