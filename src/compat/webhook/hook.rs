//! What a hooks-file hook is once compiled (`compile.rs`): the endpoint's
//! one compat value ([`Hook`], carried by
//! [`Dialect::HooksFile`](crate::config::Dialect::HooksFile)). It depends
//! on nothing in `config`, so that `config` may hold it.

use std::path::PathBuf;

use crate::http::Method;

use crate::receive::values::Source;

/// The `[server]` settings of hooks files, resolved (`settings.rs`).
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// The hooks files (`hooks_files`, default none), resolved against the
    /// config's directory.
    pub files: Vec<PathBuf>,
    /// URL prefix of their hooks (`hooks_url_prefix`, default `hooks`).
    pub url_prefix: String,
    /// Methods of a hook without `http-methods` (`hooks_http_methods`,
    /// webhook's `-http-methods`; default none: any method).
    pub http_methods: Vec<Method>,
    /// A hook whose rule requires a signature deduplicates redeliveries
    /// by the sender's delivery id (`hooks_deduplicate`, default true).
    pub deduplicate: bool,
}

/// How one hook reads its request, makes its values and answers: the
/// parts of a hook `invoke` does not do the native way.
#[derive(Debug)]
pub struct Hook {
    /// How its request is read (`receive.rs`, `read.rs`).
    pub reading: Reading,
    /// How its values are made (`values.rs`).
    pub values: HookValues,
    /// How it answers (`answer.rs`).
    pub answer: HookAnswer,
}

/// The options of adnanh/webhook's way of reading a request.
#[derive(Debug, Clone, Default)]
pub struct Reading {
    /// `incoming-payload-content-type`, when set.
    pub content_type: Option<String>,
    /// `parse-parameters-as-json`.
    pub json_params: Vec<Source>,
    /// `trigger-signature-soft-failures`.
    pub soft_signatures: bool,
}

/// How a hook makes the values of its run.
#[derive(Debug)]
pub struct HookValues {
    /// `pass-arguments-to-command`, in order.
    pub args: Vec<Source>,
    /// `pass-environment-to-command`: variable name and source.
    pub env: Vec<(String, Source)>,
    /// `pass-file-to-command`.
    pub files: Vec<HookFile>,
    /// Directory the files go to (`command-working-directory`, else the
    /// system's temporary directory).
    pub file_dir: PathBuf,
}

/// One `pass-file-to-command` entry.
#[derive(Debug)]
pub struct HookFile {
    /// Environment variable that gets the file's path.
    pub env: String,
    /// What goes in the file.
    pub source: Source,
    /// `base64decode`.
    pub base64: bool,
}

/// How a hook answers: adnanh/webhook's texts and options (the status of
/// a rule that does not match is the endpoint's
/// `receive.answer.ignored_status`).
#[derive(Debug, Clone, Default)]
pub struct HookAnswer {
    /// `response-message` (without `include-command-output-in-response`).
    pub message: String,
    /// `response-headers`, on a request that matched.
    pub headers: Vec<(String, String)>,
    /// `success-http-response-code` when it is a known status, else 200.
    pub success: u16,
    /// `include-command-output-in-response`: wait and answer the output.
    pub output: bool,
    /// `include-command-output-in-response-on-error`.
    pub output_on_error: bool,
}

impl Hook {
    /// Whether its run is async: without
    /// `include-command-output-in-response` (webhook waits for the
    /// command only to answer its output).
    pub fn run_async(&self) -> bool {
        !self.answer.output
    }
}
