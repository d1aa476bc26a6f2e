//! Where the running configuration came from: the file, and its text then. A reload
//! (`server::reload`, which defines `ConfigSource::reload`) reads the file again, compares it
//! with that text section by section, and replaces the text once it applied the new one.

use std::path::{Path, PathBuf};

/// The file the running configuration came from, and its text then.
pub struct ConfigSource {
    path: PathBuf,
    /// Locked for a whole reload, so that reloads run one at a time.
    text: tokio::sync::Mutex<String>,
}

impl ConfigSource {
    pub fn new(path: &Path, text: String) -> ConfigSource {
        ConfigSource { path: path.to_path_buf(), text: tokio::sync::Mutex::new(text) }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The text the running configuration came from, held until the guard drops: a reload
    /// holds it throughout and writes the new text into it once applied.
    pub(crate) async fn running_text(&self) -> tokio::sync::MutexGuard<'_, String> {
        self.text.lock().await
    }
}
