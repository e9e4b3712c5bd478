//! Test plugin: a 48 MiB static buffer, so its linear memory's declared
//! minimum is over 48 MiB (a test of the memory cap refusing it up front).

use nexo_sdk::agent::{Agent, Manifest, RunError};

/// Zeroed, so it costs nothing in the file: only the memory's minimum grows.
static mut BUFFER: [u8; 48 << 20] = [0; 48 << 20];

struct BigMemory;

impl Agent for BigMemory {
    fn manifest() -> Manifest {
        Manifest::new("big-memory", "Declares over 48 MiB of minimum memory (a test of the memory cap)")
    }

    fn run(input: String) -> Result<String, RunError> {
        // The address escapes through black_box, so the buffer is kept, whole.
        let buffer = core::hint::black_box(core::ptr::addr_of_mut!(BUFFER));
        let i = input.len() % (48 << 20);
        // SAFETY: the guest is single-threaded, and `i` is in bounds.
        let byte = unsafe {
            (*buffer)[i] = input.len() as u8;
            core::hint::black_box((*buffer)[i])
        };
        Ok(format!("byte {byte}"))
    }
}

nexo_sdk::export_agent!(BigMemory);
