//! Certificates for tests of TLS: a throwaway certificate authority and server
//! certificates it signs for `localhost` and `127.0.0.1`, made with the `openssl` command
//! (Debian's `openssl`, installed by `.ci/run`). Under `CI=true` a missing `openssl` fails
//! the test that needs it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A certificate authority in a directory: `<name>-ca.pem` and its key.
#[derive(Debug)]
pub struct TestCa {
    dir: PathBuf,
    name: String,
}

/// A server certificate and its key, as PEM files.
#[derive(Debug, Clone)]
pub struct ServerCert {
    /// The certificate.
    pub cert: PathBuf,
    /// Its private key (PKCS#8).
    pub key: PathBuf,
}

fn openssl(args: &[&str], dir: &Path) {
    let out = Command::new("openssl").args(args).current_dir(dir).output().unwrap_or_else(|e| {
        panic!("the `openssl` command is needed to make test certificates (apt-get install openssl): {e}")
    });
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

impl TestCa {
    /// A new authority named `name`, its files in `dir`, valid for two days.
    ///
    /// # Panics
    /// When `openssl` is missing or fails.
    pub fn new(dir: &Path, name: &str) -> Self {
        let (cert, key) = (format!("{name}-ca.pem"), format!("{name}-ca.key"));
        openssl(
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &cert,
                "-days",
                "2",
                "-subj",
                &format!("/CN={name} test CA"),
            ],
            dir,
        );
        Self { dir: dir.to_owned(), name: name.to_owned() }
    }

    /// The authority's certificate, for clients to trust.
    pub fn cert(&self) -> PathBuf {
        self.dir.join(format!("{}-ca.pem", self.name))
    }

    /// A server certificate for `localhost` and `127.0.0.1` signed by this authority,
    /// written as `<file>.pem` and `<file>.key`.
    ///
    /// # Panics
    /// When `openssl` fails.
    pub fn issue(&self, file: &str) -> ServerCert {
        let (cert, key, csr, ext) =
            (format!("{file}.pem"), format!("{file}.key"), format!("{file}.csr"), format!("{file}.ext"));
        std::fs::write(
            self.dir.join(&ext),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        openssl(
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                "/CN=localhost",
            ],
            &self.dir,
        );
        let ca_cert = format!("{}-ca.pem", self.name);
        let ca_key = format!("{}-ca.key", self.name);
        openssl(
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &ca_cert,
                "-CAkey",
                &ca_key,
                "-CAcreateserial",
                "-out",
                &cert,
                "-days",
                "2",
                "-extfile",
                &ext,
            ],
            &self.dir,
        );
        ServerCert { cert: self.dir.join(cert), key: self.dir.join(key) }
    }
}
