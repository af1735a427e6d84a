//! The `--metrics-listen` setting: an address, or `off`.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

use crate::MetricsError;

/// Where a service serves `GET /metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsListen {
    /// No metrics listener.
    Off,
    /// Listen on this address (port 0: any free port; the bound address is
    /// logged with the field `metrics_addr`).
    On(SocketAddr),
}

impl FromStr for MetricsListen {
    type Err = MetricsError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("off") {
            return Ok(MetricsListen::Off);
        }
        s.parse()
            .map(MetricsListen::On)
            .map_err(|_| MetricsError::BadListen {
                value: s.to_owned(),
            })
    }
}

impl fmt::Display for MetricsListen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetricsListen::Off => f.write_str("off"),
            MetricsListen::On(addr) => write!(f, "{addr}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_addresses_and_off() {
        assert_eq!("off".parse::<MetricsListen>().unwrap(), MetricsListen::Off);
        assert_eq!("OFF".parse::<MetricsListen>().unwrap(), MetricsListen::Off);
        assert_eq!(
            "0.0.0.0:9451".parse::<MetricsListen>().unwrap(),
            MetricsListen::On("0.0.0.0:9451".parse().unwrap())
        );
        assert_eq!(
            "[::1]:0".parse::<MetricsListen>().unwrap().to_string(),
            "[::1]:0"
        );
        let e = "localhost:9450".parse::<MetricsListen>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "\"localhost:9450\" is not a metrics listen address: expected ip:port (port 0 = any free port) or off"
        );
    }
}
