//! Certificates for the TLS tests, made afresh by each test with rcgen
//! (ring keys, ECDSA P-256) and written as PEM files into a directory of
//! its own: a CA; a server certificate for 127.0.0.1 and localhost and a
//! client certificate, both signed by it; and a client certificate signed
//! by another CA, which the server must not trust.
//!
//! Shared by the server's TLS suite and the binary's (`crates/e2e`, which
//! includes this file by path: test helpers cannot be a dependency).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// A certificate and its key, as files.
pub struct Identity {
    pub cert: PathBuf,
    pub key: PathBuf,
}

pub struct Pki {
    /// The CA the server trusts (`tls-ca-cert-file`).
    pub ca: PathBuf,
    /// The server's certificate, for 127.0.0.1 and localhost, signed by `ca`.
    pub server: Identity,
    /// A client certificate signed by `ca`.
    pub client: Identity,
    /// A client certificate signed by another CA.
    pub stranger: Identity,
    /// The server's key as SEC1 (`BEGIN EC PRIVATE KEY`) rather than
    /// PKCS#8: the same key, in the form OpenSSL's `ec` command writes.
    pub server_key_sec1: PathBuf,
}

impl Pki {
    pub fn new(dir: &Path) -> Pki {
        let trusted = ca("Engram test CA");
        // Made the same way as the trusted one: its certificates look
        // alike, but do not chain to `trusted`.
        let other_ca = ca("Someone else's CA");
        let write = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let server_key = KeyPair::generate().unwrap();
        let server_cert = leaf(
            &trusted,
            &server_key,
            "engram test server",
            &["127.0.0.1", "localhost"],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let identity = |name: &str, issuer: &CertifiedIssuer<'static, KeyPair>| {
            let key = KeyPair::generate().unwrap();
            let cert = leaf(issuer, &key, name, &[], ExtendedKeyUsagePurpose::ClientAuth);
            Identity {
                cert: write(&format!("{name}.pem"), &cert),
                key: write(&format!("{name}.key"), &key.serialize_pem()),
            }
        };
        Pki {
            ca: write("ca.pem", &trusted.pem()),
            server: Identity {
                cert: write("server.pem", &server_cert),
                key: write("server.key", &server_key.serialize_pem()),
            },
            client: identity("client", &trusted),
            stranger: identity("stranger", &other_ca),
            server_key_sec1: write("server-sec1.key", &sec1_pem(server_key.serialized_der())),
        }
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(&self.ca).unwrap()
    }
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

fn leaf(
    issuer: &CertifiedIssuer<'static, KeyPair>,
    key: &KeyPair,
    name: &str,
    names: &[&str],
    usage: ExtendedKeyUsagePurpose,
) -> String {
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut params = CertificateParams::new(names).unwrap();
    params.distinguished_name.push(DnType::CommonName, name);
    params.extended_key_usages = vec![usage];
    params.use_authority_key_identifier_extension = true;
    params.signed_by(key, issuer).unwrap().pem()
}

/// The SEC1 form of a PKCS#8 EC key: PKCS#8 (RFC 5208) is
/// `SEQUENCE { INTEGER version, SEQUENCE algorithm, OCTET STRING key }`,
/// and for an EC key the octet string holds the SEC1 `ECPrivateKey`.
fn sec1_pem(pkcs8: &[u8]) -> String {
    let (tag, body, _) = der_element(pkcs8);
    assert_eq!(tag, 0x30, "PKCS#8 is a SEQUENCE");
    let (version, _, rest) = der_element(body);
    assert_eq!(version, 0x02, "its version INTEGER");
    let (algorithm, _, rest) = der_element(rest);
    assert_eq!(algorithm, 0x30, "its algorithm SEQUENCE");
    let (key, sec1, _) = der_element(rest);
    assert_eq!(key, 0x04, "its key OCTET STRING");
    pem::encode(&pem::Pem::new("EC PRIVATE KEY", sec1.to_vec()))
}

/// One DER element: its tag, its contents, what follows it.
fn der_element(bytes: &[u8]) -> (u8, &[u8], &[u8]) {
    let tag = bytes[0];
    let (length, header) = match bytes[1] {
        short if short < 0x80 => (short as usize, 2),
        long => {
            let count = (long & 0x7f) as usize;
            let length = bytes[2..2 + count]
                .iter()
                .fold(0usize, |n, byte| n << 8 | *byte as usize);
            (length, 2 + count)
        }
    };
    let body = &bytes[header..header + length];
    (tag, body, &bytes[header + length..])
}
