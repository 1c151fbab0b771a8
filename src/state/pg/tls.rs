//! TLS to the database on the rustls + ring trigd already links: checked
//! (`verify-full`: `ca_file` or the bundled roots, and the host name) or,
//! for `prefer` and `require`, encrypted without a check of the
//! certificate, as libpq does without a root file.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::{DigitallySignedStruct, SignatureScheme};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

use super::settings::SslMode;

/// The client settings for `mode` with `roots` (empty: the bundled ones).
pub fn client_config(mode: SslMode, roots: &[CertificateDer<'static>]) -> rustls::ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions");
    if mode != SslMode::VerifyFull {
        return builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unchecked(provider)))
            .with_no_client_auth();
    }
    let mut store = rustls::RootCertStore::empty();
    if roots.is_empty() {
        store.roots = webpki_roots::TLS_SERVER_ROOTS.to_vec();
    } else {
        let (_, ignored) = store.add_parsable_certificates(roots.iter().cloned());
        if ignored > 0 {
            log::warn!("state: {ignored} certificate(s) of ca_file are not usable as roots");
        }
    }
    builder.with_root_certificates(store).with_no_client_auth()
}

/// Accepts any certificate but checks the handshake's signatures: the
/// connection is encrypted, the server not authenticated (`require`).
#[derive(Debug)]
struct Unchecked(Arc<CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
