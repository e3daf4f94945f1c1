//! Where a bundle may make retrace read. A bundle is input from someone
//! else (recorded on a CI runner, sent by a colleague), and `trace.json`,
//! its module list and its full-state stream name files. Every such name is
//! resolved here, and by default only inside the bundle's directory: no
//! absolute path, no `..`, no symbolic link that leads out of it, and no
//! module read from where it lay on the recording machine when the bundle
//! holds no copy of it.
//!
//! The exception is asked for, never taken: [`Reach::Anywhere`] (the CLI's
//! and the stub's `--allow-outside-bundle`) reads what a bundle names where
//! it names it, as LLDB's `trace load` does — for bundles one wrote oneself
//! that name modules in place (the shim's live traces, hand-written
//! bundles).

use std::path::{Component, Path, PathBuf};

/// How far the files a bundle names may be.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Reach {
    /// Inside the bundle's directory only (the default).
    #[default]
    Inside,
    /// Anywhere: absolute paths, `..`, links out, modules at their system
    /// paths. For bundles one trusts.
    Anywhere,
}

impl Reach {
    /// The reach a user's `--allow-outside-bundle` (or a configuration's
    /// `allowOutsideBundle`) asks for.
    pub fn allowing_outside(allowed: bool) -> Reach {
        if allowed {
            Reach::Anywhere
        } else {
            Reach::Inside
        }
    }

    /// The option that asks another retrace program (the stub) for this
    /// reach; `None` for the default.
    pub fn option(self) -> Option<&'static str> {
        (self == Reach::Anywhere).then_some("--allow-outside-bundle")
    }
}

/// Why a name a bundle holds was not followed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutsideBundle {
    /// An absolute path.
    #[error("{named:?} is an absolute path")]
    Absolute {
        /// The name as the bundle gives it.
        named: String,
    },
    /// A path that climbs out with `..`.
    #[error("{named:?} climbs out of the bundle with \"..\"")]
    ParentDir {
        /// The name as the bundle gives it.
        named: String,
    },
    /// A path inside that a symbolic link leads out of the bundle.
    #[error("{named:?} is a symbolic link out of the bundle (to {target})")]
    LinkOut {
        /// The name as the bundle gives it.
        named: String,
        /// Where the link leads.
        target: PathBuf,
    },
    /// An empty name, or one with a NUL byte.
    #[error("{named:?} is no file name")]
    NoName {
        /// The name as the bundle gives it.
        named: String,
    },
    /// A module with no copy in the bundle, named only by its path on the
    /// recording machine.
    #[error("module {system_path} has no copy in the bundle (no \"file\")")]
    NoCopy {
        /// Its path on the recording machine.
        system_path: String,
    },
}

/// A bundle's directory and how far the names in it may reach. Names are
/// relative to the description that holds them (`here`): the bundle's
/// `trace.json`, or an exec'd program's `exec<N>/trace.json`, whose names
/// reach up into the shared `threads/` and `modules/` with `../` but
/// never above the bundle's directory (`root`).
#[derive(Debug, Clone)]
pub struct BundleDir {
    root: PathBuf,
    /// `root` with every link resolved, when it exists.
    real_root: Option<PathBuf>,
    /// The folder of the description being read, relative to `root`.
    here: PathBuf,
    reach: Reach,
}

impl BundleDir {
    /// The bundle in directory `dir` (its `trace.json` there).
    pub fn new(dir: &Path, reach: Reach) -> BundleDir {
        let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
        BundleDir { root: dir.to_path_buf(), real_root: dir.canonicalize().ok(), here: PathBuf::new(), reach }
    }

    /// The bundle whose description is `trace_json`. An exec'd program's
    /// description (`DIR/exec<N>/trace.json`, listed in `DIR/trace.json`'s
    /// `retrace.execImages`) is read within the whole bundle, `DIR`.
    pub fn of_trace_json(trace_json: &Path, reach: Reach) -> BundleDir {
        let dir = trace_json.parent().unwrap_or(Path::new("."));
        // (Only a folder named as the recorder names them, `exec<N>`: the
        // folder above any other bundle is not looked at.)
        let exec_folder = |name: &&str| name.strip_prefix("exec").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if let (Some(name), Some(parent)) = (dir.file_name().and_then(|n| n.to_str()).filter(exec_folder), dir.parent()) {
            let listed = std::fs::read(parent.join("trace.json"))
                .ok()
                .and_then(|text| serde_json::from_slice::<serde_json::Value>(&text).ok())
                .and_then(|bundle| bundle.pointer("/retrace/execImages").and_then(|images| images.as_array()).cloned())
                .is_some_and(|images| images.iter().filter_map(|image| image.as_str()).any(|image| Path::new(image) == Path::new(name).join("trace.json")));
            if listed {
                return BundleDir { here: PathBuf::from(name), ..BundleDir::new(parent, reach) };
            }
        }
        BundleDir::new(dir, reach)
    }

    /// The description another one names (`retrace.execImages`), and the
    /// bundle as its names are read.
    pub fn nested(&self, named: &str) -> Result<(PathBuf, BundleDir), OutsideBundle> {
        let path = self.file(named)?;
        let here = match self.reach {
            Reach::Inside => self.inside(named)?.parent().map(Path::to_path_buf).unwrap_or_default(),
            Reach::Anywhere => self.here.join(named).parent().map(Path::to_path_buf).unwrap_or_default(),
        };
        Ok((path, BundleDir { here, ..self.clone() }))
    }

    /// The bundle's directory.
    pub fn dir(&self) -> &Path {
        &self.root
    }

    /// How far its names may reach.
    pub fn reach(&self) -> Reach {
        self.reach
    }

    /// `named`, relative to the description's folder, as a path relative
    /// to the bundle's directory; refused when it is absolute or climbs
    /// above that directory.
    fn inside(&self, named: &str) -> Result<PathBuf, OutsideBundle> {
        let no_name = || OutsideBundle::NoName { named: named.to_string() };
        if named.is_empty() || named.contains('\0') {
            return Err(no_name());
        }
        let mut relative = self.here.clone();
        for component in Path::new(named).components() {
            match component {
                Component::Prefix(_) | Component::RootDir => return Err(OutsideBundle::Absolute { named: named.to_string() }),
                Component::ParentDir => {
                    if !relative.pop() {
                        return Err(OutsideBundle::ParentDir { named: named.to_string() });
                    }
                }
                Component::CurDir => {}
                Component::Normal(part) => relative.push(part),
            }
        }
        if relative.as_os_str().is_empty() {
            return Err(no_name());
        }
        Ok(relative)
    }

    /// The file the bundle calls `named` (a trace, a stream, a module's
    /// copy, a jitdump, another program's description), relative to the
    /// folder of the description naming it. Refused when it would lie
    /// outside the bundle's directory (see the module doc); a name inside
    /// that does not exist is given back, for its reading to fail with the
    /// reason.
    pub fn file(&self, named: &str) -> Result<PathBuf, OutsideBundle> {
        if self.reach == Reach::Anywhere {
            return Ok(self.root.join(&self.here).join(named));
        }
        let path = self.root.join(self.inside(named)?);
        self.stays_inside(named, &path)?;
        Ok(path)
    }

    /// Refuses `path` (inside by its name) when a link takes it out.
    fn stays_inside(&self, named: &str, path: &Path) -> Result<(), OutsideBundle> {
        let Some(real_dir) = &self.real_root else { return Ok(()) };
        let link_out = |target: PathBuf| OutsideBundle::LinkOut { named: named.to_string(), target };
        match path.canonicalize() {
            Ok(real) if real.starts_with(real_dir) => Ok(()),
            Ok(real) => Err(link_out(real)),
            // Not there (or a link to nothing): what of it exists must be
            // inside, and a dangling link is not followed.
            Err(_) => {
                if let Ok(meta) = path.symlink_metadata() {
                    if meta.file_type().is_symlink() {
                        return Err(link_out(std::fs::read_link(path).unwrap_or_default()));
                    }
                }
                let mut ancestor = path.parent();
                while let Some(folder) = ancestor {
                    if let Ok(real) = folder.canonicalize() {
                        return if real.starts_with(real_dir) { Ok(()) } else { Err(link_out(real)) };
                    }
                    ancestor = folder.parent();
                }
                Ok(())
            }
        }
    }

    /// Where a module's bytes are read: its copy in the bundle (`file`);
    /// without one, its path on the recording machine, only when the reach
    /// is [`Reach::Anywhere`].
    pub fn module(&self, file: Option<&str>, system_path: &str) -> Result<PathBuf, OutsideBundle> {
        match file {
            Some(file) => self.file(file),
            None if self.reach == Reach::Anywhere => Ok(PathBuf::from(system_path)),
            None => Err(OutsideBundle::NoCopy { system_path: system_path.to_string() }),
        }
    }

    /// The bundle's copy of the file the recorded program mapped from
    /// `system_path` (`modules/<system_path>`, as the recorder and LLDB's
    /// `trace save` lay them out), when it is inside.
    pub fn copy_of_mapped(&self, system_path: &str) -> Option<PathBuf> {
        if Path::new(system_path).components().any(|c| c == Component::ParentDir) {
            return None;
        }
        let relative = system_path.trim_start_matches('/');
        let top = BundleDir { reach: Reach::Inside, here: PathBuf::new(), ..self.clone() };
        top.file(&format!("modules/{relative}")).ok()
    }
}

/// What to say after a refusal: how to allow it, for a bundle one trusts.
pub const ALLOW_HINT: &str =
    "retrace reads no file outside a bundle's directory unless told; if you trust this bundle, run the command again with --allow-outside-bundle";

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle() -> (PathBuf, BundleDir) {
        let root = std::env::temp_dir().join(format!("retrace-paths-{}-{:?}", std::process::id(), std::thread::current().id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("bundle/modules/usr/lib")).unwrap();
        std::fs::write(root.join("bundle/modules/usr/lib/libc.so.6"), b"elf").unwrap();
        std::fs::write(root.join("canary"), b"secret").unwrap();
        let dir = BundleDir::new(&root.join("bundle"), Reach::Inside);
        (root, dir)
    }

    #[test]
    fn names_inside_are_followed() {
        let (root, dir) = bundle();
        assert_eq!(dir.file("modules/usr/lib/libc.so.6").unwrap(), root.join("bundle/modules/usr/lib/libc.so.6"));
        assert_eq!(dir.file("./modules/usr/lib/libc.so.6").unwrap(), root.join("bundle/./modules/usr/lib/libc.so.6"));
        // Not there: given back, for the read to say so.
        assert_eq!(dir.file("threads/7.intelpt_trace").unwrap(), root.join("bundle/threads/7.intelpt_trace"));
        assert_eq!(dir.copy_of_mapped("/usr/lib/libc.so.6"), Some(root.join("bundle/modules/usr/lib/libc.so.6")));
        assert_eq!(dir.module(Some("modules/usr/lib/libc.so.6"), "/usr/lib/libc.so.6").unwrap(), root.join("bundle/modules/usr/lib/libc.so.6"));
    }

    #[test]
    fn names_out_are_refused() {
        let (root, dir) = bundle();
        let canary = root.join("canary");
        assert!(matches!(dir.file(canary.to_str().unwrap()), Err(OutsideBundle::Absolute { .. })));
        assert!(matches!(dir.file("../canary"), Err(OutsideBundle::ParentDir { .. })));
        assert!(matches!(dir.file("modules/../../canary"), Err(OutsideBundle::ParentDir { .. })));
        assert!(matches!(dir.file(""), Err(OutsideBundle::NoName { .. })));
        assert!(matches!(dir.file("."), Err(OutsideBundle::NoName { .. })));
        assert!(matches!(dir.file("a\0b"), Err(OutsideBundle::NoName { .. })));
        assert!(matches!(dir.module(None, "/usr/lib/libc.so.6"), Err(OutsideBundle::NoCopy { .. })));
        assert_eq!(dir.copy_of_mapped("/../canary"), None);
        // Links: to a file out, to a folder out, dangling, and one inside.
        std::os::unix::fs::symlink(&canary, root.join("bundle/modules/prog")).unwrap();
        std::os::unix::fs::symlink(&root, root.join("bundle/up")).unwrap();
        std::os::unix::fs::symlink(root.join("nothing"), root.join("bundle/dangling")).unwrap();
        std::os::unix::fs::symlink("usr/lib/libc.so.6", root.join("bundle/modules/libc")).unwrap();
        assert_eq!(dir.file("modules/prog"), Err(OutsideBundle::LinkOut { named: "modules/prog".into(), target: canary.canonicalize().unwrap() }));
        assert!(matches!(dir.file("up/canary"), Err(OutsideBundle::LinkOut { .. })));
        assert!(matches!(dir.file("up/not-there"), Err(OutsideBundle::LinkOut { .. })));
        assert!(matches!(dir.file("dangling"), Err(OutsideBundle::LinkOut { .. })));
        assert!(dir.file("modules/libc").is_ok());
        // Allowed: taken as named.
        let anywhere = BundleDir::new(&root.join("bundle"), Reach::Anywhere);
        assert_eq!(anywhere.file("../canary").unwrap(), root.join("bundle/../canary"));
        assert_eq!(anywhere.module(None, "/usr/lib/libc.so.6").unwrap(), PathBuf::from("/usr/lib/libc.so.6"));
        // (A mapped file's copy is looked for inside only, whatever the reach.)
        assert_eq!(anywhere.copy_of_mapped("/../canary"), None);
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn an_exec_image_reads_within_the_whole_bundle() {
        let (root, _) = bundle();
        std::fs::create_dir_all(root.join("bundle/exec1")).unwrap();
        let top = r#"{"type":"intel-pt","cpuInfo":{"vendor":"GenuineIntel","family":6,"model":85,"stepping":4},"processes":[],
            "retrace":{"version":"0","execImages":["exec1/trace.json"]}}"#;
        std::fs::write(root.join("bundle/trace.json"), top).unwrap();
        std::fs::write(root.join("bundle/exec1/trace.json"), "{}").unwrap();
        let whole = BundleDir::new(&root.join("bundle"), Reach::Inside);
        let (path, nested) = whole.nested("exec1/trace.json").unwrap();
        assert_eq!(path, root.join("bundle/exec1/trace.json"));
        for exec in [nested, BundleDir::of_trace_json(&root.join("bundle/exec1/trace.json"), Reach::Inside)] {
            assert_eq!(exec.file("../modules/usr/lib/libc.so.6").unwrap(), root.join("bundle/modules/usr/lib/libc.so.6"));
            assert_eq!(exec.file("x").unwrap(), root.join("bundle/exec1/x"));
            assert!(matches!(exec.file("../../canary"), Err(OutsideBundle::ParentDir { .. })));
        }
        // A folder the bundle does not list is a bundle of its own.
        std::fs::create_dir_all(root.join("bundle/exec2")).unwrap();
        let alone = BundleDir::of_trace_json(&root.join("bundle/exec2/trace.json"), Reach::Inside);
        assert!(matches!(alone.file("../modules/usr/lib/libc.so.6"), Err(OutsideBundle::ParentDir { .. })));
        std::fs::remove_dir_all(root).unwrap();
    }
}
