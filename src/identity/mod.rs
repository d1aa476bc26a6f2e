//! Who is calling and how they prove it: MFA, OAuth for the gateways' MCP clients, OAuth toward
//! the apps, toolgate's own authorization server and the web sign-in.

pub mod app_oauth;
pub mod gateway_oauth;
pub mod mfa;
pub mod oauth_server;
pub mod signin;
