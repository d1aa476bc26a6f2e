//! Every Rust integration test in one binary: one link instead of one per file, which is most of
//! the test build time. Each module is one area; `common` is the harness (the real binary on
//! ephemeral ports).

mod common;

mod api_apps;
mod api_gateways;
mod api_identity;
mod api_keys;
mod api_lists;
mod api_logs;
mod api_mfa;
mod api_scopes;
mod api_team;
mod app_health;
mod audit;
mod audit_refusals;
mod audit_signed;
mod conf_files;
mod console;
mod docs;
mod durability;
mod filters_edge;
mod governance_pins;
mod governance_pins_meta;
mod governance_rule_cost;
mod governance_rules;
mod harness_smoke;
mod identity_changes;
mod jwt;
mod layers;
mod limits_concurrency;
mod mcp_defects;
mod mcp_upstreams;
mod metrics_prometheus;
mod operations_keys;
mod packaging;
mod process_logs;
mod process_signals;
mod records_versions;
mod reload_sections;
mod security_bounds;
mod security_connections;
mod security_guards;
mod security_hidden_text;
mod security_identity;
mod security_identity_allowlist;
mod security_identity_edge;
mod security_isolation;
mod security_keys;
mod security_mcp;
mod security_mfa;
mod security_misc;
mod security_streams;
mod security_team;
mod shutdown;
mod spec_literal;
