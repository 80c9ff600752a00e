//! How long a TCP connection between manager and worker may go unanswered before it is given
//! up: the hop's own deadline, independent of how long a model takes.
//!
//! A request to a worker waits for its answer, and a model may take seconds or minutes: a
//! deadline on the answer alone (`[cluster] request_timeout_s`) cannot tell a slow model from
//! a link that stopped carrying packets. The kernel can: with keepalive probes on an idle
//! connection and `TCP_USER_TIMEOUT` on one with data in flight, a connection whose peer has
//! acknowledged nothing for [`LinkSettings::silence`] fails, whichever way the link broke
//! (requests lost on the way there, answers or acknowledgements on the way back). A worker
//! that is merely slow acknowledges the probes and is waited for.

use std::time::Duration;

/// Keepalive probes sent before a silent connection is given up (the last unanswered one, or
/// `TCP_USER_TIMEOUT`, whichever comes first, ends it).
const PROBES: u32 = 3;

/// What a connection to (or from) a worker tolerates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkSettings {
    /// A TCP connect, then the TLS and HTTP handshakes, to a worker.
    pub connect_timeout: Duration,
    /// How long a connection may go with its peer acknowledging nothing (data sent, or
    /// keepalive probes of an idle connection) before it fails. At least a second: keepalive
    /// timers count in seconds.
    pub silence: Duration,
}

impl Default for LinkSettings {
    /// `[cluster] connect_timeout_ms = 3000`, `link_timeout_ms = 10000`.
    fn default() -> Self {
        LinkSettings {
            connect_timeout: Duration::from_secs(3),
            silence: Duration::from_secs(10),
        }
    }
}

impl LinkSettings {
    /// Time between keepalive probes of an idle connection (and before the first): a third of
    /// the silence allowed in whole seconds (the kernel's unit), at least one, so the peer has
    /// several chances to answer.
    pub fn probe_every(&self) -> Duration {
        Duration::from_secs((self.silence.as_secs() / u64::from(PROBES)).max(1))
    }

    /// Applies the settings to a connected socket: keepalive probes, and `TCP_USER_TIMEOUT`
    /// for data sent and not acknowledged. Linux counts an idle connection's unanswered probes
    /// against the same timeout.
    pub fn apply(&self, tcp: &tokio::net::TcpStream) -> std::io::Result<()> {
        let socket = socket2::SockRef::from(tcp);
        let every = self.probe_every();
        let keepalive = socket2::TcpKeepalive::new()
            .with_time(every)
            .with_interval(every)
            .with_retries(PROBES);
        socket.set_tcp_keepalive(&keepalive)?;
        socket.set_tcp_user_timeout(Some(self.silence.max(Duration::from_secs(1))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_connection_gets_keepalive_probes_and_a_user_timeout() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let tcp = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let settings = LinkSettings {
            connect_timeout: Duration::from_secs(1),
            silence: Duration::from_millis(4500),
        };
        settings.apply(&tcp).unwrap();
        let socket = socket2::SockRef::from(&tcp);
        assert!(socket.keepalive().unwrap());
        assert_eq!(socket.tcp_keepalive_time().unwrap(), Duration::from_secs(1));
        assert_eq!(
            socket.tcp_keepalive_interval().unwrap(),
            Duration::from_secs(1)
        );
        assert_eq!(socket.tcp_keepalive_retries().unwrap(), PROBES);
        assert_eq!(
            socket.tcp_user_timeout().unwrap(),
            Some(Duration::from_millis(4500))
        );
        // The defaults: a probe every 3 s, given up after 10 s of silence.
        assert_eq!(
            LinkSettings::default().probe_every(),
            Duration::from_secs(3)
        );
    }
}
