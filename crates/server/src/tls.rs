//! TLS, as Redis 7.0 offers it: a second port (`tls-port`) beside the plain
//! one, the server's certificate and key (`tls-cert-file`, `tls-key-file`),
//! client certificates checked against a CA bundle (`tls-ca-cert-file`,
//! `tls-auth-clients`), and the protocol versions offered
//! (`tls-protocols`). Spoken with rustls and its `ring` provider.
//!
//! The settings are read once, at startup: `Server::start` builds the
//! acceptor before it opens the keyspace, so a missing file or a key that
//! does not fit its certificate stops the server before it creates
//! anything, with an error naming the parameter and the file. CONFIG SET
//! refuses them (no live reload of certificates yet); CONFIG GET shows
//! them.
//!
//! The handshake runs in the connection's own task, never in the accept
//! loop, bounded by `handshake_timeout`: a client that connects and says
//! nothing costs a task and a client slot until then, and delays no one.
//! A failed handshake is logged (info) with the peer's address and
//! counted (INFO engram's `tls_handshake_failures`; Redis counts them
//! nowhere, and they are not `rejected_connections`, which counts what
//! the server refused).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedProtocolVersion};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::clients::ClientInfo;
use crate::redis_params;
use crate::shared::Shared;

/// How long a client has to finish its handshake (Redis has no such
/// bound; a client that never finishes would hold its slot forever).
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The parameters this module acts on, which CONFIG SET refuses (they are
/// read once, at startup). The other `tls-*` parameters are
/// `redis_params`': kept without effect, or refused unless empty.
pub const PARAMETERS: &[&str] = &[
    "tls-port",
    "tls-cert-file",
    "tls-key-file",
    "tls-ca-cert-file",
    "tls-auth-clients",
    "tls-protocols",
];

/// Whether clients must present a certificate signed by the CA
/// (`tls-auth-clients`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AuthClients {
    /// A client without a valid certificate is refused (Redis's default).
    #[default]
    Yes,
    /// No certificate is asked for.
    No,
    /// A certificate is asked for and verified if presented; a client
    /// without one is served.
    Optional,
}

impl AuthClients {
    pub fn name(self) -> &'static str {
        match self {
            AuthClients::Yes => "yes",
            AuthClients::No => "no",
            AuthClients::Optional => "optional",
        }
    }
}

/// A protocol version `tls-protocols` may name. TLSv1 and TLSv1.1, which
/// Redis also accepts, are refused: rustls does not speak them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Tls12,
    Tls13,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Tls12 => "TLSv1.2",
            Protocol::Tls13 => "TLSv1.3",
        }
    }

    fn rustls(self) -> &'static SupportedProtocolVersion {
        match self {
            Protocol::Tls12 => &rustls::version::TLS12,
            Protocol::Tls13 => &rustls::version::TLS13,
        }
    }

    /// Reads a `tls-protocols` value: names separated by spaces, in any
    /// case, as Redis reads them. Empty means both versions.
    pub fn parse_list(text: &str) -> Result<Vec<Protocol>, String> {
        let mut protocols = Vec::new();
        for word in text.split_whitespace() {
            let protocol = match word.to_ascii_lowercase().as_str() {
                "tlsv1.2" => Protocol::Tls12,
                "tlsv1.3" => Protocol::Tls13,
                "tlsv1" | "tlsv1.1" => {
                    return Err(format!(
                        "tls-protocols: {word} is not supported (rustls speaks only TLSv1.2 \
                         and TLSv1.3, the versions that are still considered safe)"
                    ))
                }
                _ => {
                    return Err(format!(
                        "tls-protocols: unknown protocol '{word}' (expected TLSv1.2, TLSv1.3 \
                         or both, separated by a space)"
                    ))
                }
            };
            if !protocols.contains(&protocol) {
                protocols.push(protocol);
            }
        }
        Ok(protocols)
    }
}

/// The TLS settings of `Config` (`config.tls`).
#[derive(Clone, Debug)]
pub struct TlsSettings {
    /// `tls-port`: 0 (the default) serves no TLS.
    pub port: u16,
    /// `tls-cert-file`: the server's certificate chain, PEM, leaf first.
    pub cert_file: Option<PathBuf>,
    /// `tls-key-file`: its private key, PEM (PKCS#8, PKCS#1 RSA or SEC1).
    pub key_file: Option<PathBuf>,
    /// `tls-ca-cert-file`: the CA certificates client certificates must
    /// chain to, PEM.
    pub ca_cert_file: Option<PathBuf>,
    pub auth_clients: AuthClients,
    /// `tls-protocols`, as given; empty: TLSv1.2 and TLSv1.3.
    pub protocols: Vec<Protocol>,
    /// Not a redis.conf parameter: how long a handshake may take before
    /// the client is dropped (tests shorten it).
    pub handshake_timeout: Duration,
}

impl Default for TlsSettings {
    fn default() -> Self {
        TlsSettings {
            port: 0,
            cert_file: None,
            key_file: None,
            ca_cert_file: None,
            auth_clients: AuthClients::Yes,
            protocols: Vec::new(),
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
        }
    }
}

impl TlsSettings {
    /// Sets one of [`PARAMETERS`] from the configuration file or the
    /// command line, checked as Redis checks it.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
        let param = redis_params::find(name).expect("the TLS parameters are Redis's");
        let value = param
            .check_kind(value)
            .map_err(|reason| format!("'{name}': {reason}"))?;
        let path = || (!value.is_empty()).then(|| PathBuf::from(&value));
        match name {
            "tls-port" => self.port = value.parse().expect("checked as 0 to 65535"),
            "tls-cert-file" => self.cert_file = path(),
            "tls-key-file" => self.key_file = path(),
            "tls-ca-cert-file" => self.ca_cert_file = path(),
            "tls-auth-clients" => {
                self.auth_clients = match value.as_str() {
                    "yes" => AuthClients::Yes,
                    "no" => AuthClients::No,
                    _ => AuthClients::Optional,
                }
            }
            "tls-protocols" => self.protocols = Protocol::parse_list(&value)?,
            _ => unreachable!("{name} is not one of tls::PARAMETERS"),
        }
        Ok(())
    }

    /// The values CONFIG GET shows, under Redis's names.
    pub fn parameters(&self) -> Vec<(&'static str, String)> {
        let path = |file: &Option<PathBuf>| {
            file.as_deref()
                .map_or(String::new(), |p| p.display().to_string())
        };
        let protocols: Vec<&str> = self.protocols.iter().map(|p| p.name()).collect();
        vec![
            ("tls-port", self.port.to_string()),
            ("tls-cert-file", path(&self.cert_file)),
            ("tls-key-file", path(&self.key_file)),
            ("tls-ca-cert-file", path(&self.ca_cert_file)),
            ("tls-auth-clients", self.auth_clients.name().into()),
            ("tls-protocols", protocols.join(" ")),
        ]
    }

    /// The protocol versions offered.
    fn versions(&self) -> Vec<&'static SupportedProtocolVersion> {
        let protocols = match self.protocols.as_slice() {
            [] => &[Protocol::Tls12, Protocol::Tls13][..],
            given => given,
        };
        protocols.iter().map(|p| p.rustls()).collect()
    }
}

/// Builds what accepts TLS clients from the settings, reading every file
/// they name; the error names the parameter and the file at fault.
pub fn acceptor(settings: &TlsSettings) -> Result<TlsAcceptor, String> {
    let needed = |file: &Option<PathBuf>, name: &str, what: &str| {
        file.clone().ok_or_else(|| {
            format!(
                "tls-port {} is set, but {name} is not ({what})",
                settings.port
            )
        })
    };
    let cert_file = needed(
        &settings.cert_file,
        "tls-cert-file",
        "the server's certificate chain, PEM",
    )?;
    let key_file = needed(
        &settings.key_file,
        "tls-key-file",
        "the server's private key, PEM",
    )?;
    let chain = certificates("tls-cert-file", &cert_file)?;
    let key = private_key(&key_file)?;

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&settings.versions())
        .map_err(|e| format!("tls-protocols: {e}"))?;
    let builder = match settings.auth_clients {
        AuthClients::No => builder.with_no_client_auth(),
        auth => {
            let ca_file = settings.ca_cert_file.clone().ok_or_else(|| {
                format!(
                    "tls-auth-clients {} needs tls-ca-cert-file (the CA certificates that \
                     sign client certificates, PEM); or set tls-auth-clients no",
                    auth.name()
                )
            })?;
            let mut roots = RootCertStore::empty();
            for certificate in certificates("tls-ca-cert-file", &ca_file)? {
                roots.add(certificate).map_err(|e| {
                    format!(
                        "tls-ca-cert-file {}: not a usable CA certificate: {e}",
                        ca_file.display()
                    )
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = match auth {
                AuthClients::Optional => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            let verifier = verifier
                .build()
                .map_err(|e| format!("tls-ca-cert-file {}: {e}", ca_file.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder.with_single_cert(chain, key).map_err(|e| match e {
        rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => format!(
            "tls-key-file {} is not the key of the certificate in tls-cert-file {}",
            key_file.display(),
            cert_file.display()
        ),
        e => format!(
            "tls-cert-file {} with tls-key-file {}: {e}",
            cert_file.display(),
            key_file.display()
        ),
    })?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Every certificate of a PEM file, in order; at least one.
fn certificates(param: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let read = |e: rustls::pki_types::pem::Error| format!("{param} {}: {}", path.display(), e);
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(read)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(read)?;
    if certificates.is_empty() {
        return Err(format!(
            "{param} {}: no certificate in it (expected PEM blocks \
             '-----BEGIN CERTIFICATE-----')",
            path.display()
        ));
    }
    Ok(certificates)
}

/// The first private key of a PEM file: PKCS#8 (`BEGIN PRIVATE KEY`),
/// PKCS#1 (`BEGIN RSA PRIVATE KEY`) or SEC1 (`BEGIN EC PRIVATE KEY`).
fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => format!(
            "tls-key-file {}: no private key in it (expected a PEM block \
             '-----BEGIN PRIVATE KEY-----', 'RSA PRIVATE KEY' or 'EC PRIVATE KEY'; \
             encrypted keys are not supported)",
            path.display()
        ),
        e => format!("tls-key-file {}: {e}", path.display()),
    })
}

/// Serves a client of the TLS port: the handshake, then the connection
/// as any other. The client was registered at accept (it counts toward
/// maxclients and CLIENT LIST shows it during its handshake, as in
/// Redis); a failed handshake takes it out again.
pub async fn serve(
    shared: Arc<Shared>,
    acceptor: TlsAcceptor,
    stream: TcpStream,
    info: Arc<ClientInfo>,
    rank: usize,
) {
    match handshake(&shared, &acceptor, stream, info.addr, Some(&info)).await {
        Some(stream) => crate::connection::serve(shared, stream, info, rank).await,
        None => shared.clients.unregister(info.id),
    }
}

/// The server's side of the handshake, bounded by the timeout (and by a
/// kill or shutdown, for a registered client); None when it failed,
/// logged and counted.
pub async fn handshake(
    shared: &Shared,
    acceptor: &TlsAcceptor,
    stream: TcpStream,
    peer: SocketAddr,
    client: Option<&ClientInfo>,
) -> Option<TlsStream<TcpStream>> {
    let timeout = shared.config.tls.handshake_timeout;
    let killed = async {
        match client {
            // A kill leaves a permit (`request_kill`), so one that came
            // before this wait is not missed.
            Some(client) => client.kill.notified().await,
            None => std::future::pending().await,
        }
    };
    let failure = tokio::select! {
        accepted = tokio::time::timeout(timeout, acceptor.accept(stream)) => match accepted {
            Ok(Ok(stream)) => return Some(stream),
            Ok(Err(e)) => format!("failed: {e}"),
            Err(_) => format!("not finished after {} ms", timeout.as_millis()),
        },
        _ = killed => return None,
    };
    shared
        .stats
        .tls_handshake_failures
        .fetch_add(1, Ordering::Relaxed);
    log::info!("TLS handshake with {peer} {failure}; closing");
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_by_name() {
        assert_eq!(Protocol::parse_list(""), Ok(vec![]));
        assert_eq!(Protocol::parse_list("TLSv1.3"), Ok(vec![Protocol::Tls13]));
        assert_eq!(
            Protocol::parse_list(" tlsv1.2  TLSV1.3 TLSv1.2"),
            Ok(vec![Protocol::Tls12, Protocol::Tls13])
        );
        let old = Protocol::parse_list("TLSv1.1 TLSv1.2").unwrap_err();
        assert!(old.contains("TLSv1.1 is not supported"), "{old}");
        let unknown = Protocol::parse_list("SSLv3").unwrap_err();
        assert!(unknown.contains("unknown protocol 'SSLv3'"), "{unknown}");
    }

    #[test]
    fn empty_protocols_offer_both_versions() {
        let mut settings = TlsSettings::default();
        assert_eq!(settings.versions().len(), 2);
        settings.set("tls-protocols", "TLSv1.3").unwrap();
        assert_eq!(settings.versions(), vec![&rustls::version::TLS13]);
    }

    #[test]
    fn settings_are_checked_and_shown_as_redis_shows_them() {
        let mut settings = TlsSettings::default();
        let shown = settings.parameters();
        assert!(shown.contains(&("tls-port", "0".into())));
        assert!(shown.contains(&("tls-auth-clients", "yes".into())));
        assert!(shown.contains(&("tls-protocols", String::new())));
        settings.set("tls-port", "6380").unwrap();
        settings.set("tls-auth-clients", "OPTIONAL").unwrap();
        settings
            .set("tls-cert-file", "/etc/engram/cert.pem")
            .unwrap();
        settings.set("tls-protocols", "tlsv1.2 tlsv1.3").unwrap();
        let shown = settings.parameters();
        assert!(shown.contains(&("tls-port", "6380".into())));
        assert!(shown.contains(&("tls-auth-clients", "optional".into())));
        assert!(shown.contains(&("tls-cert-file", "/etc/engram/cert.pem".into())));
        assert!(shown.contains(&("tls-protocols", "TLSv1.2 TLSv1.3".into())));
        settings.set("tls-cert-file", "").unwrap();
        assert_eq!(settings.cert_file, None);
        for (name, value, error) in [
            ("tls-port", "65536", "between 0 and 65535"),
            ("tls-port", "x", "couldn't be parsed into an integer"),
            ("tls-auth-clients", "maybe", "must be one of the following"),
            ("tls-protocols", "TLSv2", "unknown protocol 'TLSv2'"),
        ] {
            let err = settings.set(name, value).unwrap_err();
            assert!(err.contains(error), "{name} {value}: {err}");
        }
        // A refused value changes nothing.
        assert_eq!(settings.port, 6380);
        assert_eq!(settings.auth_clients, AuthClients::Optional);
    }

    #[test]
    fn a_port_without_files_is_refused_by_name() {
        let settings = TlsSettings {
            port: 6380,
            ..TlsSettings::default()
        };
        let err = acceptor(&settings).err().unwrap();
        assert!(err.contains("tls-cert-file is not"), "{err}");
        let settings = TlsSettings {
            port: 6380,
            cert_file: Some("/nonexistent/cert.pem".into()),
            ..TlsSettings::default()
        };
        let err = acceptor(&settings).err().unwrap();
        assert!(err.contains("tls-key-file is not"), "{err}");
    }
}
