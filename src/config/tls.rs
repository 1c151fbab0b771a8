//! `[server]`'s HTTPS settings: `tls_cert`, `tls_key`,
//! `tls_handshake_timeout`, `redirect_http` (docs/https.md). The files
//! are only named here; they are read when trigd serves
//! (`http::tls::load_pair`) and by `trigd check`, so a reload of the
//! config does not depend on them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::raw::{self, defaults};
use super::types::{duration, Errors, Src};
use super::{resolve, secret_path};

/// HTTPS settings with defaults filled in and paths resolved.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Tls {
    /// PEM certificate chain (`tls_cert`) and its private key (`tls_key`),
    /// relative to the config's directory; `None`: plain HTTP.
    pub files: Option<TlsFiles>,
    /// Time a client has to complete its TLS handshake
    /// (`tls_handshake_timeout`, default 10s).
    pub handshake_timeout: Duration,
    /// A second, plain-HTTP address whose requests are redirected to
    /// HTTPS (`redirect_http`).
    pub redirect_http: Option<String>,
}

/// The certificate and key files.
#[derive(Debug, Clone, PartialEq)]
pub struct TlsFiles {
    /// PEM certificate chain, leaf first (`tls_cert`).
    pub cert: PathBuf,
    /// PEM private key (`tls_key`).
    pub key: PathBuf,
}

/// The HTTPS settings of `raw`; both files or neither. (That a redirect
/// listener comes only with HTTPS, from these files or from `[acme]`, is
/// [`check_https`]'s.)
pub fn tls(src: &Src, raw: &raw::RawServer, dir: &Path, errs: &mut Errors) -> Tls {
    let handshake_timeout = duration(
        src,
        raw.tls_handshake_timeout.as_ref(),
        "server.tls_handshake_timeout",
        Duration::from_secs(defaults::TLS_HANDSHAKE_TIMEOUT_SECS),
        errs,
    );
    let files = match (&raw.tls_cert, &raw.tls_key) {
        // The key may be a systemd credential (`credential:NAME`).
        (Some(cert), Some(key)) => match secret_path(dir, key.get_ref()) {
            Ok(key) => Some(TlsFiles {
                cert: resolve(dir, Path::new(cert.get_ref())),
                key,
            }),
            Err(msg) => {
                errs.at(src, key.span(), "server.tls_key", msg);
                None
            }
        },
        (Some(one), None) | (None, Some(one)) => {
            let msg = "tls_cert and tls_key go together: name both the PEM certificate chain and its private key";
            errs.at(src, one.span(), "server.tls_cert", msg);
            None
        }
        (None, None) => None,
    };
    Tls {
        files,
        handshake_timeout,
        redirect_http: raw.redirect_http.as_ref().map(|r| r.get_ref().clone()),
    }
}

/// HTTPS comes from `tls_cert` and `tls_key` or from `[acme]` (`acme`),
/// not both; `redirect_http` needs one of them, and `[acme]` needs
/// `redirect_http` (HTTP-01 is answered over plain HTTP).
pub fn check_https(
    src: &Src,
    raw: &raw::RawServer,
    acme: Option<&toml::Spanned<raw::RawAcme>>,
    errs: &mut Errors,
) {
    let files = raw.tls_cert.as_ref().or(raw.tls_key.as_ref());
    match (acme, files, &raw.redirect_http) {
        (Some(_), Some(f), _) => {
            let msg = "tls_cert and tls_key name a certificate you manage, [acme] gets one: set one or the other";
            errs.at(src, f.span(), "server.tls_cert", msg);
        }
        (Some(a), None, None) => {
            let msg = "[acme] proves the domains over plain HTTP (HTTP-01): set redirect_http = \"0.0.0.0:80\" in [server]";
            errs.at(src, a.span(), "server.redirect_http", msg);
        }
        (None, None, Some(r)) => {
            let msg =
                "redirect_http redirects to HTTPS, which needs tls_cert and tls_key, or [acme]";
            errs.at(src, r.span(), "server.redirect_http", msg);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    fn errors(server: &str) -> String {
        let text = format!("[server]\n{server}\n");
        match crate::config::load_str(Path::new("/etc/trigd/config.toml"), &text, &[]) {
            Ok(_) => String::new(),
            Err(errs) => errs
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    /// The key may be a systemd credential; a bad name is located at
    /// `tls_key` (the variable is unset in tests: `credential()` is
    /// checked with a directory in `config::tests`).
    #[test]
    fn the_key_may_be_a_credential() {
        let e = errors("tls_cert = \"c.pem\"\ntls_key = \"credential:../k\"");
        assert!(
            e.contains("config.toml:3:") && e.contains("server.tls_key") && e.contains("file name"),
            "{e}"
        );
    }

    #[test]
    fn both_files_or_neither_and_a_redirect_only_with_https() {
        let e = errors("tls_cert = \"c.pem\"");
        assert!(
            e.contains("config.toml:2:") && e.contains("tls_cert and tls_key go together"),
            "{e}"
        );
        let e = errors("tls_key = \"k.pem\"");
        assert!(e.contains("tls_cert and tls_key go together"), "{e}");
        let e = errors("redirect_http = \"0.0.0.0:80\"");
        assert!(
            e.contains("config.toml:2:") && e.contains("needs tls_cert and tls_key"),
            "{e}"
        );
        let e = errors("tls_handshake_timeout = \"0s\"");
        assert!(e.contains("tls_handshake_timeout"), "{e}");
        let ok = "tls_cert = \"c.pem\"\ntls_key = \"/k.pem\"\nredirect_http = \":80\"";
        assert_eq!(errors(ok), "");
        let cfg = crate::config::load_str(
            Path::new("/etc/trigd/config.toml"),
            &format!("[server]\n{ok}\n"),
            &[],
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        let files = cfg.server.tls.files.unwrap_or_else(|| panic!("no files"));
        assert_eq!(files.cert, Path::new("/etc/trigd/c.pem"));
        assert_eq!(files.key, Path::new("/k.pem"));
        assert_eq!(cfg.server.tls.handshake_timeout.as_secs(), 10);
    }
}
