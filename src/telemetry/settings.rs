//! Whether and where traces are exported: the config's `telemetry` section merged with the
//! standard `OTEL_*` environment variables. Pure (the environment is passed in), so the rules
//! are unit-tested.

use crate::config::TelemetryConfig;

/// The resolved trace export settings; `None` fields are left to the OpenTelemetry SDK, which
/// reads its own environment variables.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The full traces URL (`…/v1/traces`), from the config; `None`: the exporter takes
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`.
    pub endpoint: Option<String>,
    /// `service.name`: the config's, else `switchyard` unless `OTEL_SERVICE_NAME` is set.
    pub service_name: Option<String>,
    /// Parent-based ratio sampling from the config; `None`: `OTEL_TRACES_SAMPLER` or the SDK
    /// default (every trace, following the parent's decision).
    pub sample_ratio: Option<f64>,
}

/// The export settings, or `None` when traces are off.
pub fn settings(
    config: &TelemetryConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<Settings> {
    let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    if set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return None;
    }
    if set("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim().eq_ignore_ascii_case("none")) {
        return None;
    }
    let endpoint = config
        .otlp_endpoint
        .as_deref()
        .map(|base| format!("{}/v1/traces", base.trim_end_matches('/')));
    let from_env = set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some()
        || set("OTEL_EXPORTER_OTLP_ENDPOINT").is_some();
    if endpoint.is_none() && !from_env {
        return None;
    }
    let service_name = match (&config.service_name, set("OTEL_SERVICE_NAME")) {
        (Some(name), _) => Some(name.clone()),
        (None, Some(_)) => None,
        (None, None) => Some("switchyard".to_owned()),
    };
    Some(Settings {
        endpoint,
        service_name,
        sample_ratio: config.sample_ratio,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::HashMap;

    use super::*;

    fn resolve(config: &TelemetryConfig, vars: &[(&str, &str)]) -> Option<Settings> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        settings(config, &|name| vars.get(name).cloned())
    }

    fn with_endpoint(url: &str) -> TelemetryConfig {
        TelemetryConfig {
            otlp_endpoint: Some(url.to_owned()),
            ..TelemetryConfig::default()
        }
    }

    #[test]
    fn off_without_an_endpoint() {
        assert_eq!(resolve(&TelemetryConfig::default(), &[]), None);
        assert_eq!(
            resolve(&TelemetryConfig::default(), &[("OTEL_SERVICE_NAME", "gw")]),
            None
        );
        assert_eq!(
            resolve(
                &TelemetryConfig::default(),
                &[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]
            ),
            None
        );
    }

    #[test]
    fn config_endpoint_gets_the_traces_path() {
        let s = resolve(&with_endpoint("http://collector:4318/"), &[]).unwrap();
        assert_eq!(
            s.endpoint.as_deref(),
            Some("http://collector:4318/v1/traces")
        );
        assert_eq!(s.service_name.as_deref(), Some("switchyard"));
        assert_eq!(s.sample_ratio, None);
    }

    #[test]
    fn env_endpoints_turn_tracing_on_and_are_left_to_the_exporter() {
        for var in [
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        ] {
            let s = resolve(&TelemetryConfig::default(), &[(var, "http://c:4318")]).unwrap();
            assert_eq!(s.endpoint, None, "{var}");
        }
    }

    #[test]
    fn the_standard_switches_turn_it_off() {
        let cfg = with_endpoint("http://c:4318");
        assert_eq!(resolve(&cfg, &[("OTEL_SDK_DISABLED", "TRUE")]), None);
        assert_eq!(resolve(&cfg, &[("OTEL_TRACES_EXPORTER", "none")]), None);
        assert!(resolve(&cfg, &[("OTEL_SDK_DISABLED", "false")]).is_some());
        assert!(resolve(&cfg, &[("OTEL_TRACES_EXPORTER", "otlp")]).is_some());
    }

    #[test]
    fn service_name_config_then_env_then_default() {
        let mut cfg = with_endpoint("http://c:4318");
        assert_eq!(
            resolve(&cfg, &[("OTEL_SERVICE_NAME", "from-env")])
                .unwrap()
                .service_name,
            None,
            "left to the SDK, which reads OTEL_SERVICE_NAME"
        );
        cfg.service_name = Some("from-config".into());
        cfg.sample_ratio = Some(0.25);
        let s = resolve(&cfg, &[("OTEL_SERVICE_NAME", "from-env")]).unwrap();
        assert_eq!(s.service_name.as_deref(), Some("from-config"));
        assert_eq!(s.sample_ratio, Some(0.25));
    }
}
