//! `observability:`: how long the request log keeps its entries and its rollups, how many
//! label values the Prometheus series may take, and the process's own log (format, level).

use crate::config::*;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawObservability {
    log_retention_days: Option<u64>,
    max_log_rows: Option<u64>,
    rollup_retention_days: Option<u64>,
    metric_gateway_labels: Option<usize>,
    metric_tool_labels: Option<usize>,
    log_format: Option<String>,
    log_level: Option<String>,
    otlp_endpoint: Option<String>,
    service_name: Option<String>,
}

impl RawObservability {
    pub(super) fn build(self) -> Result<ObservabilityConfig, ConfigError> {
        let days = self.log_retention_days.unwrap_or(7);
        if !(1..=3650).contains(&days) {
            return Err(invalid("observability.log_retention_days", "must be between 1 and 3650"));
        }
        let max_log_rows = self.max_log_rows.unwrap_or(10_000_000);
        if max_log_rows < 1000 {
            return Err(invalid("observability.max_log_rows", "must be at least 1000"));
        }
        let rollup_days = self.rollup_retention_days.unwrap_or(90);
        if !(1..=3650).contains(&rollup_days) {
            return Err(invalid("observability.rollup_retention_days", "must be between 1 and 3650"));
        }
        let log_format = match self.log_format.as_deref() {
            None => None,
            Some("json") => Some(LogFormat::Json),
            Some("text") => Some(LogFormat::Text),
            Some(_) => return Err(invalid("observability.log_format", "must be json or text")),
        };
        let log_level = self.log_level.unwrap_or_else(|| DEFAULT_LOG_LEVEL.to_string());
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&log_level) {
            return Err(invalid(
                "observability.log_level",
                format!("not a level or filter ({e}), e.g. info or debug,pingora=warn"),
            ));
        }
        let otlp_endpoint = match self.otlp_endpoint {
            None => None,
            Some(e) => match url::Url::parse(&e) {
                Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Some(e),
                _ => return Err(invalid("observability.otlp_endpoint", "must be an http or https URL")),
            },
        };
        let service_name = self.service_name.unwrap_or_else(|| "toolgate".to_string());
        if service_name.is_empty() || service_name.len() > 100 {
            return Err(invalid("observability.service_name", "must have 1 to 100 characters"));
        }
        Ok(ObservabilityConfig {
            otlp_endpoint,
            service_name,
            log_format,
            log_level,
            log_retention: Duration::from_secs(days * 86_400),
            max_log_rows,
            rollup_retention: Duration::from_secs(rollup_days * 86_400),
            metric_gateway_labels: label_cap(self.metric_gateway_labels, 100, "observability.metric_gateway_labels")?,
            metric_tool_labels: label_cap(self.metric_tool_labels, 200, "observability.metric_tool_labels")?,
        })
    }
}

/// A cap on a label's values: each one is a series per other label combination, so a cap too
/// high for Prometheus is refused.
fn label_cap(value: Option<usize>, default: usize, field: &str) -> Result<usize, ConfigError> {
    let cap = value.unwrap_or(default);
    if cap > 10_000 {
        return Err(invalid(field, "must be between 0 (no such label) and 10000"));
    }
    Ok(cap)
}
