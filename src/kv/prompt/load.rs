//! What a model folder holds for the prompt: `tokenizer.json`, the chat
//! templates and the named special tokens, read as transformers reads
//! them (`PreTrainedTokenizerBase.from_pretrained`).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::Value as Json;
use tokenizers::Tokenizer;

use super::error::LoadError;

/// The named special tokens transformers passes to chat templates
/// (`SPECIAL_TOKENS_ATTRIBUTES`), by the names the templates know them.
pub(super) const SPECIAL_TOKENS: [&str; 7] = [
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
];

/// A model folder's prompt files, read.
#[derive(Debug)]
pub(super) struct Files {
    pub(super) tokenizer: Tokenizer,
    /// The template used without tools (or with tools, when there is no
    /// `tool_use` one).
    pub(super) template: Option<String>,
    /// The template named `tool_use`, used when a request has tools.
    pub(super) tool_template: Option<String>,
    /// `(name, token)` of the special tokens the folder names.
    pub(super) special: Vec<(&'static str, String)>,
}

pub(super) fn read(dir: &Path) -> Result<Files, LoadError> {
    let path = dir.join("tokenizer.json");
    let tokenizer = Tokenizer::from_file(&path).map_err(|e| match fs::metadata(&path) {
        Err(source) => LoadError::Io {
            path: path.clone(),
            source,
        },
        Ok(_) => LoadError::Tokenizer {
            path: path.clone(),
            reason: e.to_string(),
        },
    })?;
    let config_path = dir.join("tokenizer_config.json");
    let config = read_json(&config_path)?.unwrap_or(Json::Null);
    let map = read_json(&dir.join("special_tokens_map.json"))?.unwrap_or(Json::Null);

    let (mut template, tool_template) = match config.get("chat_template") {
        None | Some(Json::Null) => (None, None),
        Some(Json::String(s)) => (Some(s.clone()), None),
        Some(Json::Array(named)) => {
            let find = |name: &str| {
                named.iter().find_map(|t| {
                    (t.get("name")?.as_str()? == name)
                        .then(|| t.get("template")?.as_str().map(str::to_owned))
                        .flatten()
                })
            };
            (find("default"), find("tool_use"))
        }
        Some(_) => {
            return Err(LoadError::Config {
                path: config_path,
                reason: "`chat_template` is neither a string nor a list of {name, template}".into(),
            })
        }
    };
    // transformers ≥ 4.50 saves the template beside the config, and reads
    // it from there first.
    let jinja = dir.join("chat_template.jinja");
    match fs::read_to_string(&jinja) {
        Ok(source) => template = Some(source),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(LoadError::Io {
                path: jinja,
                source,
            })
        }
    }

    let special = SPECIAL_TOKENS
        .iter()
        .filter_map(|&name| {
            let token = config.get(name).or_else(|| map.get(name))?;
            let text = match token {
                Json::String(s) => s.clone(),
                Json::Object(o) => o.get("content")?.as_str()?.to_owned(),
                _ => return None,
            };
            Some((name, text))
        })
        .collect();
    Ok(Files {
        tokenizer,
        template,
        tool_template,
        special,
    })
}

/// A JSON file, `None` when there is none.
fn read_json(path: &PathBuf) -> Result<Option<Json>, LoadError> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(LoadError::Io {
                path: path.clone(),
                source,
            })
        }
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| LoadError::Config {
            path: path.clone(),
            reason: e.to_string(),
        })
}
