//! Which paths of a volume a copy takes: globs relative to the volume's root, chosen
//! with their whole subtrees, minus the excluded ones. Pure: no file system access.

use std::path::{Component, Path};

use globset::{Glob, GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};
use serde::{Deserialize, Serialize};

/// The paths to copy: a path is chosen when it or a directory above it matches an
/// `include` glob, and neither it nor a directory above it matches an `exclude` glob.
///
/// Globs are relative to the volume's root and `/`-separated: `*` and `?` stay within
/// one segment, `**` spans segments, `[abc]` is a class.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Selection {
    /// Globs of the paths to copy, each with everything under it.
    pub include: Vec<String>,
    /// Globs of paths left alone, even under an included one.
    #[serde(default)]
    pub exclude: Vec<String>,
}

/// Why `pattern` cannot choose paths, or None when it can. The message names the
/// pattern and reads well after a prefix naming the field, such as
/// `spec.paths.include[0]: `.
pub fn pattern_error(pattern: &str) -> Option<String> {
    if pattern.is_empty() {
        return Some("the pattern is empty; name a path relative to the volume's root".into());
    }
    if pattern.starts_with('/') {
        return Some(format!(
            "{pattern:?} is absolute; paths are relative to the volume's root"
        ));
    }
    for segment in trimmed(pattern).split('/') {
        match segment {
            ".." => {
                return Some(format!(
                    "{pattern:?} has a \"..\" segment; paths stay inside the volume"
                ));
            }
            "." => {
                return Some(format!(
                    "{pattern:?} has a \".\" segment; write the path without it"
                ));
            }
            // A path never has an empty segment, so such a glob would match nothing.
            "" => return Some(format!("{pattern:?} has an empty segment (\"//\")")),
            _ => {}
        }
    }
    glob(pattern)
        .err()
        .map(|e| format!("{pattern:?} is not a valid glob: {}", e.kind()))
}

/// `config/` means the directory `config`, as does `config`.
fn trimmed(pattern: &str) -> &str {
    pattern.trim_end_matches('/')
}

fn glob(pattern: &str) -> Result<Glob, globset::Error> {
    GlobBuilder::new(trimmed(pattern))
        .literal_separator(true)
        .build()
}

/// A [`Selection`] made ready to answer for many paths.
#[derive(Debug, Clone)]
pub struct Matcher {
    include: GlobSet,
    exclude: GlobSet,
    include_prefixes: Vec<Prefix>,
    exclude_prefixes: Vec<Prefix>,
    /// Chooses the whole tree, its root included (see [`Matcher::whole`]).
    whole: bool,
}

impl Matcher {
    /// Compiles the selection's globs; the error is [`pattern_error`]'s message for
    /// the first glob refused.
    pub fn new(selection: &Selection) -> Result<Self, String> {
        let (include, include_prefixes) = compile(&selection.include)?;
        let (exclude, exclude_prefixes) = compile(&selection.exclude)?;
        Ok(Self {
            include,
            exclude,
            include_prefixes,
            exclude_prefixes,
            whole: false,
        })
    }

    /// Chooses every path but the excluded ones, and the root itself: a copy gives the
    /// live root the snapshot root's metadata too.
    pub fn whole(exclude: &[String]) -> Result<Self, String> {
        let selection = Selection {
            include: vec!["**".into()],
            exclude: exclude.to_vec(),
        };
        Ok(Self {
            whole: true,
            ..Self::new(&selection)?
        })
    }

    /// Whether this is a [`Matcher::whole`].
    pub fn is_whole(&self) -> bool {
        self.whole
    }

    /// Whether `path` (relative to the root, e.g. `db/data/x.dat`) is to be copied.
    pub fn is_chosen(&self, path: impl AsRef<Path>) -> bool {
        let path = path.as_ref();
        !self.is_excluded(path) && ancestors(path).any(|p| self.includes(p))
    }

    /// Whether `path` or a directory above it matches an exclude glob.
    pub fn is_excluded(&self, path: impl AsRef<Path>) -> bool {
        ancestors(path.as_ref()).any(|p| self.excludes(p))
    }

    /// Whether the directory `dir` may hold chosen paths, itself included, so that a
    /// walk must descend into it. False only when no chosen path can be under it; when
    /// in doubt (a `**`, alternatives), true.
    pub fn may_contain_chosen(&self, dir: impl AsRef<Path>) -> bool {
        let dir = dir.as_ref();
        !self.is_excluded(dir)
            && (ancestors(dir).any(|p| self.includes(p)) || self.could_include_under(dir))
    }

    /// Whether an include glob matches `path` itself (not its ancestors).
    pub(super) fn includes(&self, path: &Path) -> bool {
        self.include.is_match(path)
    }

    /// Whether an exclude glob matches `path` itself (not its ancestors).
    pub(super) fn excludes(&self, path: &Path) -> bool {
        self.exclude.is_match(path)
    }

    /// Whether an include glob may match something strictly below `dir`.
    pub(super) fn could_include_under(&self, dir: &Path) -> bool {
        could_match_under(&self.include_prefixes, dir)
    }

    /// Whether an exclude glob may match something strictly below `dir`: then a
    /// directory there cannot be deleted whole.
    pub fn could_exclude_under(&self, dir: &Path) -> bool {
        could_match_under(&self.exclude_prefixes, dir)
    }
}

/// `path` and the directories above it, up to (not including) the root.
fn ancestors(path: &Path) -> impl Iterator<Item = &Path> {
    path.ancestors().filter(|p| !p.as_os_str().is_empty())
}

fn compile(patterns: &[String]) -> Result<(GlobSet, Vec<Prefix>), String> {
    let mut set = GlobSetBuilder::new();
    let mut prefixes = Vec::with_capacity(patterns.len());
    for pattern in patterns {
        if let Some(why) = pattern_error(pattern) {
            return Err(why);
        }
        set.add(glob(pattern).map_err(|e| e.to_string())?);
        prefixes.push(Prefix::new(trimmed(pattern)));
    }
    Ok((set.build().map_err(|e| e.to_string())?, prefixes))
}

/// A glob cut into its segments, to tell whether it can match below a directory.
#[derive(Debug, Clone)]
enum Prefix {
    /// `{a,b/c}` may hide separators: anything may match.
    Anything,
    Segments(Vec<Segment>),
}

#[derive(Debug, Clone)]
enum Segment {
    /// `**`, or a segment that does not compile alone: matches any run of segments.
    Any,
    Glob(GlobMatcher),
}

impl Prefix {
    fn new(pattern: &str) -> Self {
        if pattern.contains('{') {
            return Self::Anything;
        }
        let segments = pattern
            .split('/')
            .map(|segment| match segment {
                s if s.contains("**") => Segment::Any,
                s => glob(s).map_or(Segment::Any, |g| Segment::Glob(g.compile_matcher())),
            })
            .collect();
        Self::Segments(segments)
    }
}

fn could_match_under(prefixes: &[Prefix], dir: &Path) -> bool {
    let names: Vec<&Path> = dir
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(Path::new(name)),
            _ => None,
        })
        .collect();
    prefixes.iter().any(|prefix| {
        let Prefix::Segments(segments) = prefix else {
            return true;
        };
        for (i, name) in names.iter().enumerate() {
            match segments.get(i) {
                // The glob ends above `dir`: it matches only up there.
                None => return false,
                Some(Segment::Any) => return true,
                Some(Segment::Glob(g)) if !g.is_match(name) => return false,
                Some(Segment::Glob(_)) => {}
            }
        }
        segments.len() > names.len()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matcher(include: &[&str], exclude: &[&str]) -> Matcher {
        Matcher::new(&Selection {
            include: include.iter().map(|s| s.to_string()).collect(),
            exclude: exclude.iter().map(|s| s.to_string()).collect(),
        })
        .unwrap()
    }

    #[test]
    fn paths_are_chosen_with_their_subtrees_and_exclusion_wins() {
        let cases: &[(&[&str], &[&str], &str, bool)] = &[
            (&["config"], &[], "config", true),
            (&["config"], &[], "config/app/settings.yaml", true),
            (&["config/"], &[], "config/app.yaml", true),
            (&["config"], &[], "configs/app.yaml", false),
            (&["config"], &[], "other/config", false),
            (&["db/*.dat"], &[], "db/x.dat", true),
            (&["db/*.dat"], &[], "db/sub/x.dat", false),
            (&["db/?.dat"], &[], "db/xy.dat", false),
            (&["db/[ab].dat"], &[], "db/b.dat", true),
            (&["db/[ab].dat"], &[], "db/c.dat", false),
            (&["**/today"], &[], "logs/2024/today/a.log", true),
            (&["**/today"], &[], "today", true),
            (&["logs/**/today"], &[], "logs/today", true),
            (&["logs/**/today"], &[], "logs/a/b/today", true),
            (&["logs/**/today"], &[], "logs/a/yesterday", false),
            (&["**"], &[], "any/thing", true),
            (&["db"], &["db/cache"], "db/data/x.dat", true),
            (&["db"], &["db/cache"], "db/cache", false),
            (&["db"], &["db/cache"], "db/cache/blob", false),
            (&["db"], &["**/*.tmp"], "db/a/b.tmp", false),
            (&["db/cache/keep"], &["db/cache"], "db/cache/keep", false),
            (&["db", "conf"], &[], "conf/x", true),
        ];
        for (include, exclude, path, chosen) in cases {
            assert_eq!(
                matcher(include, exclude).is_chosen(path),
                *chosen,
                "include {include:?} exclude {exclude:?}: {path}"
            );
        }
    }

    #[test]
    fn walks_descend_only_where_chosen_paths_may_be() {
        let cases: &[(&[&str], &[&str], &str, bool)] = &[
            (&["db/data/*.dat"], &[], "db", true),
            (&["db/data/*.dat"], &[], "db/data", true),
            (&["db/data/*.dat"], &[], "db/other", false),
            (&["db/data/*.dat"], &[], "logs", false),
            (&["db/data/*.dat"], &[], "db/data/x.dat", true),
            (&["d*/data"], &[], "db", true),
            (&["d*/data"], &[], "web", false),
            (&["config"], &[], "config/deep/down", true),
            (&["config"], &[], "conf", false),
            (&["**/today"], &[], "anything/at/all", true),
            (&["logs/**/today"], &[], "logs/a/b", true),
            (&["logs/**/today"], &[], "web", false),
            (&["{db,web}/x"], &[], "other", true),
            (&["db"], &["db/cache"], "db/cache", false),
            (&["db"], &["db/cache"], "db/cache/sub", false),
            (&["db/cache/keep"], &["db/cache"], "db", true),
        ];
        for (include, exclude, dir, descend) in cases {
            assert_eq!(
                matcher(include, exclude).may_contain_chosen(dir),
                *descend,
                "include {include:?} exclude {exclude:?}: {dir}"
            );
        }
    }

    #[test]
    fn the_whole_tree_is_chosen_but_for_what_is_excluded() {
        let whole = Matcher::whole(&[".velero".into(), "**/*.tmp".into()]).unwrap();
        assert!(whole.is_whole() && !matcher(&["**"], &[]).is_whole());
        for (path, chosen) in [
            ("a", true),
            (".hidden", true),
            ("deep/down/.x", true),
            (".velero", false),
            (".velero/x", false),
            ("a/.velero", true),
            ("a/b.tmp", false),
        ] {
            assert_eq!(whole.is_chosen(path), chosen, "{path}");
        }
        assert!(Matcher::whole(&["../x".into()]).is_err());
    }

    #[test]
    fn exclusions_below_a_directory_are_seen() {
        let m = matcher(&["db"], &["db/*/keep"]);
        assert!(m.could_exclude_under(Path::new("db")));
        assert!(m.could_exclude_under(Path::new("db/a")));
        assert!(!m.could_exclude_under(Path::new("db/a/b")));
        assert!(!m.could_exclude_under(Path::new("web")));
    }

    #[test]
    fn patterns_that_cannot_choose_paths_are_refused_with_a_reason() {
        let cases: &[(&str, Option<&str>)] = &[
            ("db", None),
            ("db/", None),
            ("db/**/x.dat", None),
            ("[ab]*.yaml", None),
            ("**", None),
            ("", Some("the pattern is empty")),
            (
                "/etc",
                Some("\"/etc\" is absolute; paths are relative to the volume's root"),
            ),
            ("/", Some("\"/\" is absolute")),
            ("a/../b", Some("\"a/../b\" has a \"..\" segment")),
            ("..", Some("\"..\" has a \"..\" segment")),
            ("./a", Some("\"./a\" has a \".\" segment")),
            ("a//b", Some("\"a//b\" has an empty segment")),
            (
                "db/[ab",
                Some("\"db/[ab\" is not a valid glob: unclosed character class"),
            ),
            (
                "{a,b",
                Some("\"{a,b\" is not a valid glob: unclosed alternate group"),
            ),
        ];
        for (pattern, want) in cases {
            let got = pattern_error(pattern);
            match want {
                None => assert_eq!(got, None, "{pattern:?}"),
                Some(start) => {
                    let got = got.unwrap_or_else(|| panic!("{pattern:?} was accepted"));
                    assert!(got.starts_with(start), "{pattern:?}: {got}");
                }
            }
        }
        let refused = Matcher::new(&Selection {
            include: vec!["db".into()],
            exclude: vec!["../x".into()],
        });
        assert!(refused.unwrap_err().contains("\"..\""));
    }
}
