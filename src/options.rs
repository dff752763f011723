//! Options library code needs, resolved from the command line: the global flags, output
//! formats, which pods or containers a command is about. `cli` parses flags into them (its
//! clap types derive their values from these); nothing below `commands` imports `cli`.

use crate::ui::ColorChoice;
use clap::ValueEnum;
use std::path::PathBuf;

/// Every global flag, resolved for one command (cluster flags empty where a command has none).
#[derive(Debug, Clone)]
pub struct Global {
    pub app_dir: PathBuf,
    pub context: Option<String>,
    pub namespace: Option<String>,
    pub kubeconfig: Option<PathBuf>,
    pub verbose: u8,
    pub quiet: bool,
    pub color: ColorChoice,
    pub no_input: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ListFormat {
    Text,
    Json,
    Yaml,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ManifestFormat {
    Yaml,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusFormat {
    Text,
    // The text report with each pod's IP (no doc comment: it would give every value a
    // description and turn `--help` into the long layout).
    Wide,
    Json,
    Yaml,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RoleFilter {
    Launcher,
    Worker,
    All,
}

/// `--role` of exec and port-forward: one pod/container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TargetRole {
    Launcher,
    Worker,
}

/// How `status` shows a run: its format, and whether it follows changes (`--watch`) or
/// waits for the end (`--wait`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watch {
    pub output: StatusFormat,
    pub watch: bool,
    pub wait: bool,
}
