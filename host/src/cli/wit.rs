//! The contract plugins are built against, carried inside the binary: the
//! `nexo:plugin` package, one WIT file per interface plus `worlds.wit`
//! (the package documentation and the four worlds).

use std::io::Write as _;
use std::path::Path;

/// The package's files, by name inside `wit/`.
pub const FILES: &[(&str, &str)] = &[
    ("worlds.wit", include_str!("../../../wit/worlds.wit")),
    ("agent.wit", include_str!("../../../wit/agent.wit")),
    ("config.wit", include_str!("../../../wit/config.wit")),
    ("log.wit", include_str!("../../../wit/log.wit")),
    ("model.wit", include_str!("../../../wit/model.wit")),
    ("durable.wit", include_str!("../../../wit/durable.wit")),
    ("hook.wit", include_str!("../../../wit/hook.wit")),
    ("mcp.wit", include_str!("../../../wit/mcp.wit")),
    ("outbound-http.wit", include_str!("../../../wit/outbound-http.wit")),
    ("sandbox-provider.wit", include_str!("../../../wit/sandbox-provider.wit")),
    ("search-backend.wit", include_str!("../../../wit/search-backend.wit")),
    ("skill.wit", include_str!("../../../wit/skill.wit")),
    ("tools.wit", include_str!("../../../wit/tools.wit")),
    ("types.wit", include_str!("../../../wit/types.wit")),
];

/// Prints every file to stdout, each after a `// wit/<name>` line.
pub fn print() {
    let mut out = std::io::stdout().lock();
    for (name, text) in FILES {
        let _ = writeln!(out, "// wit/{name}");
        let _ = out.write_all(text.as_bytes());
        let _ = writeln!(out);
    }
}

/// Writes the package into `dir` (created if missing), one file each.
pub fn write(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (name, text) in FILES {
        std::fs::write(dir.join(name), text)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_file_of_the_package_is_carried() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit");
        let mut on_disk: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".wit"))
            .collect();
        on_disk.sort();
        let mut carried: Vec<String> = super::FILES.iter().map(|(n, _)| n.to_string()).collect();
        carried.sort();
        assert_eq!(on_disk, carried, "add the new WIT file to FILES in host/src/cli/wit.rs");
    }
}
