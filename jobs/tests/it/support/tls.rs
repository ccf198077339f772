//! A test certificate authority and a server certificate it signed, for servers that
//! serve TLS.

use super::temp_dir;

/// A certificate authority made for one test, and a server certificate it signed for
/// `localhost` and 127.0.0.1, as PEM files (`ca.crt`, `server.crt`, `server.key`) in a
/// temporary directory.
pub struct TestCa {
    pub dir: tempfile::TempDir,
    /// The CA certificate, PEM: what a client trusts.
    pub ca_pem: Vec<u8>,
}

impl TestCa {
    pub fn new() -> TestCa {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
            KeyPair, KeyUsagePurpose, SanType,
        };
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "wheel-jobs test CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = KeyPair::generate().expect("CA key");
        let ca_cert = ca.self_signed(&ca_key).expect("CA certificate");
        let issuer = Issuer::new(ca, ca_key);

        let mut server =
            CertificateParams::new(vec!["localhost".to_owned()]).expect("server parameters");
        server
            .subject_alt_names
            .push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
        server
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        server.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        // Cluster nodes present it as a client too, on the cluster bus.
        server.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let server_key = KeyPair::generate().expect("server key");
        let server_cert = server
            .signed_by(&server_key, &issuer)
            .expect("server certificate");

        let dir = temp_dir();
        for (name, pem) in [
            ("ca.crt", ca_cert.pem()),
            ("server.crt", server_cert.pem()),
            ("server.key", server_key.serialize_pem()),
        ] {
            std::fs::write(dir.path().join(name), pem).expect("write a PEM file");
        }
        TestCa {
            dir,
            ca_pem: ca_cert.pem().into_bytes(),
        }
    }

    /// The redis-server arguments for serving TLS with its certificate, to clients
    /// without certificates of their own.
    pub fn server_args(&self) -> Vec<String> {
        vec![
            "--tls-cert-file".to_owned(),
            self.file("server.crt"),
            "--tls-key-file".to_owned(),
            self.file("server.key"),
            "--tls-ca-cert-file".to_owned(),
            self.file("ca.crt"),
            "--tls-auth-clients".to_owned(),
            "no".to_owned(),
        ]
    }

    /// The path of one of its files, as a redis-server argument.
    pub fn file(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }
}
