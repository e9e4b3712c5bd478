//! Which Landlock ABI confinement uses, decided from what the kernel reports.
//!
//! ABI 6 is the oldest that scopes signals, which keeps a command from killing
//! its shepherd (see `confine.rs`), so older kernels are refused rather than
//! given weaker confinement. Newer kernels are used at ABI 6 (ABI 9 adds
//! pathname Unix sockets and ABI 10 UDP; the seccomp filter already refuses
//! both). The decision, [`required_abi`], is a pure function of the probe,
//! [`KernelLandlock::probe`], so every answer a kernel can give is testable.

#![allow(unsafe_code)] // the one landlock_create_ruleset call that asks for the version

use landlock::ABI;

/// The oldest Landlock ABI confinement runs on, and the one it uses.
pub(crate) const MIN_ABI: i32 = 6;

/// What the kernel says of Landlock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KernelLandlock {
    /// Landlock is there, at this ABI version.
    Abi(i32),
    /// Built in but not enabled at boot (`EOPNOTSUPP`).
    Disabled,
    /// Not built into the kernel (`ENOSYS`, or any other error).
    Missing,
}

impl KernelLandlock {
    /// Asks the running kernel (`landlock_create_ruleset` with
    /// `LANDLOCK_CREATE_RULESET_VERSION`, which creates nothing).
    pub(crate) fn probe() -> KernelLandlock {
        const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
        // SAFETY: a null attribute pointer and size 0 are what the version query takes; no memory is passed.
        let version = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<libc::c_void>(),
                0usize,
                LANDLOCK_CREATE_RULESET_VERSION,
            )
        };
        match i32::try_from(version) {
            Ok(v) if v > 0 => KernelLandlock::Abi(v),
            _ if std::io::Error::last_os_error().raw_os_error() == Some(libc::EOPNOTSUPP) => KernelLandlock::Disabled,
            _ => KernelLandlock::Missing,
        }
    }
}

/// Why Landlock cannot confine commands on this kernel; each names the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LandlockUnusable {
    /// The kernel's Landlock predates ABI 6.
    #[error(
        "the kernel has Landlock ABI {found}, older than ABI {MIN_ABI}, which scoping signals away from the \
         process that ends a command's processes needs. Run on Linux 6.12 or later, or use bubblewrap \
         (Confinement::Bubblewrap)"
    )]
    TooOld {
        /// The ABI version the kernel reported.
        found: i32,
    },
    /// Landlock is built in but not enabled.
    #[error(
        "the kernel has Landlock but it is not enabled. Add `landlock` to the `lsm=` boot parameter, or use \
         bubblewrap (Confinement::Bubblewrap)"
    )]
    Disabled,
    /// The kernel has no Landlock.
    #[error(
        "the kernel has no Landlock (CONFIG_SECURITY_LANDLOCK). Run on Linux 6.12 or later with Landlock, or use \
         bubblewrap (Confinement::Bubblewrap)"
    )]
    Missing,
    /// The kernel reported a usable ABI but would not build the ruleset.
    #[error(
        "the kernel reported Landlock ABI {found} but refused an ABI {MIN_ABI} ruleset ({why}). Use bubblewrap \
         (Confinement::Bubblewrap)"
    )]
    Refused {
        /// The ABI version the kernel reported.
        found: i32,
        /// The error creating the ruleset.
        why: String,
    },
}

/// The ABI confinement uses on a kernel that reports `kernel`: ABI 6 from ABI
/// 6 up, refused below.
pub(crate) fn required_abi(kernel: KernelLandlock) -> Result<ABI, LandlockUnusable> {
    match kernel {
        KernelLandlock::Abi(found) if found >= MIN_ABI => Ok(ABI::V6),
        KernelLandlock::Abi(found) => Err(LandlockUnusable::TooOld { found }),
        KernelLandlock::Disabled => Err(LandlockUnusable::Disabled),
        KernelLandlock::Missing => Err(LandlockUnusable::Missing),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abis_older_than_6_are_refused_naming_the_fix() {
        for found in 1..MIN_ABI {
            let err = required_abi(KernelLandlock::Abi(found)).unwrap_err();
            assert_eq!(err, LandlockUnusable::TooOld { found });
            let text = err.to_string();
            assert!(text.contains(&format!("ABI {found}, older than ABI 6")), "{text}");
            assert!(text.contains("Linux 6.12 or later") && text.contains("Confinement::Bubblewrap"), "{text}");
        }
        // From 6 up, and past what this crate knows, ABI 6 is used.
        for found in [6, 7, 8, 11] {
            assert_eq!(required_abi(KernelLandlock::Abi(found)), Ok(ABI::V6), "ABI {found}");
        }
        let disabled = required_abi(KernelLandlock::Disabled).unwrap_err().to_string();
        assert!(disabled.contains("`lsm=`"), "{disabled}");
        let missing = required_abi(KernelLandlock::Missing).unwrap_err().to_string();
        assert!(missing.contains("CONFIG_SECURITY_LANDLOCK"), "{missing}");
    }

    /// The probe reads the running kernel: this machine's (Linux 6.15 to 6.19)
    /// has ABI 7, and any kernel from 6.12 has at least 6.
    #[test]
    fn the_probe_reads_the_kernels_abi() {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap().trim().to_string();
        let mut numbers = release.split(['.', '-']).map(|n| n.parse::<u32>().unwrap_or(0));
        let version = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
        let probed = KernelLandlock::probe();
        println!("Linux {release}: {probed:?}");
        if ((6, 15)..(7, 0)).contains(&version) {
            assert_eq!(probed, KernelLandlock::Abi(7), "Linux {release}");
        }
        if version >= (6, 12) {
            assert!(matches!(probed, KernelLandlock::Abi(n) if n >= MIN_ABI), "Linux {release}: {probed:?}");
            assert_eq!(required_abi(probed), Ok(ABI::V6));
        }
    }
}
