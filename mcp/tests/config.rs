//! `[mcp.NAME]` validation: every bad table is refused with a message naming
//! the server, the key and the fix; good tables are described without secrets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use nexo_mcp::{Server, ServerConfig};

/// A table written as a JSON object with the config file's kebab-case keys.
fn parse(text: &str) -> ServerConfig {
    serde_json::from_str(text).unwrap()
}

fn stdio() -> ServerConfig {
    ServerConfig { command: Some("node".into()), ..ServerConfig::default() }
}

fn http() -> ServerConfig {
    ServerConfig { url: Some("https://mcp.example.com/mcp".into()), ..ServerConfig::default() }
}

#[test]
fn bad_tables_name_the_key_and_the_fix() {
    let long = "x".repeat(33);
    let cases: Vec<(&str, ServerConfig, &str)> = vec![
        ("Bad_Name", stdio(), "not a valid server name"),
        ("a_b", stdio(), "no `_`"),
        ("-x", stdio(), "starting with a letter or digit"),
        (&long, stdio(), "1 to 32 characters"),
        ("none", ServerConfig::default(), "has neither `command` nor `url`"),
        ("both", ServerConfig { url: Some("https://h/mcp".into()), ..stdio() }, "has both `command` and `url`"),
        ("empty", ServerConfig { command: Some(" ".into()), ..ServerConfig::default() }, "`command` is empty"),
        (
            "h1",
            ServerConfig { headers: [("x-a".into(), "1".into())].into(), ..stdio() },
            "sets `headers`, which applies only to HTTP servers",
        ),
        ("h2", ServerConfig { token: Some("t".into()), ..stdio() }, "sets `token`, which applies only to HTTP servers"),
        (
            "h3",
            ServerConfig { allow_private: true, ..stdio() },
            "sets `allow-private`, which applies only to HTTP servers (`url`) and to servers with `net-hosts`",
        ),
        (
            "s1",
            ServerConfig { args: vec!["a".into()], ..http() },
            "sets `args`, which applies only to servers nexo starts",
        ),
        ("s2", ServerConfig { env: [("A".into(), "1".into())].into(), ..http() }, "sets `env`"),
        ("s3", ServerConfig { cwd: Some("/tmp".into()), ..http() }, "sets `cwd`"),
        ("s4", ServerConfig { confine: true, ..http() }, "sets `confine`"),
        (
            "e1",
            ServerConfig { env: [("A=B".into(), "1".into())].into(), ..stdio() },
            "`env` has a malformed variable \"A=B\"",
        ),
        ("e2", ServerConfig { env: [("".into(), "1".into())].into(), ..stdio() }, "`env` has a malformed variable"),
        ("c1", ServerConfig { confine: true, ..stdio() }, "`confine = true` without `cwd`"),
        ("c2", ServerConfig { confine: true, cwd: Some("rel".into()), ..stdio() }, "a relative path"),
        ("c3", ServerConfig { network: true, ..stdio() }, "sets `network` without `confine = true`"),
        ("n1", ServerConfig { net_hosts: vec!["a.example".into()], ..stdio() }, "sets `net-hosts` without `confine"),
        (
            "n2",
            ServerConfig {
                confine: true,
                network: true,
                cwd: Some("/srv".into()),
                net_hosts: vec!["a.example".into()],
                ..stdio()
            },
            "sets both `network = true`",
        ),
        (
            "n3",
            ServerConfig { confine: true, cwd: Some("/srv".into()), net_hosts: vec!["a.example:0".into()], ..stdio() },
            "`net-hosts`: ",
        ),
        ("n4", ServerConfig { net_hosts: vec!["a.example".into()], ..http() }, "sets `net-hosts`"),
        ("t0", ServerConfig { timeout: Some(0), ..stdio() }, "`timeout` is 0"),
        ("t1", ServerConfig { connect_timeout: Some(0), ..stdio() }, "`connect-timeout` is 0"),
        ("t2", ServerConfig { timeout: Some(100_000), ..stdio() }, "more than a day"),
        ("u1", ServerConfig { url: Some("not a url".into()), ..ServerConfig::default() }, "`url` is not a valid URL"),
        ("u2", ServerConfig { url: Some("ftp://h/mcp".into()), ..ServerConfig::default() }, "scheme `ftp`"),
        (
            "u3",
            ServerConfig { url: Some("https://u:p@h/mcp".into()), ..ServerConfig::default() },
            "carries credentials",
        ),
        (
            "u4",
            ServerConfig { url: Some("https://h/mcp?api_key=x".into()), ..ServerConfig::default() },
            "credential in its query (`api_key=`)",
        ),
        (
            "u5",
            ServerConfig { url: Some("https://h/mcp?access_token=x".into()), ..ServerConfig::default() },
            "`token-env`",
        ),
        (
            "k1",
            ServerConfig { token: Some("a".into()), token_env: Some("B".into()), ..http() },
            "sets `token` and `token-env`; give the token one way only",
        ),
        (
            "k2",
            ServerConfig { token_file: Some("/f".into()), token_command: Some("c".into()), ..http() },
            "`token-file` and `token-command`",
        ),
        ("k3", ServerConfig { token: Some(" ".into()), ..http() }, "`token` is empty"),
        ("k4", ServerConfig { token_command: Some("".into()), ..http() }, "`token-command` is empty"),
        ("k5", ServerConfig { token_env: Some("A=B".into()), ..http() }, "not a valid variable name"),
        (
            "p1",
            ServerConfig {
                url: Some("http://mcp.example.com/mcp".into()),
                token: Some("t".into()),
                ..ServerConfig::default()
            },
            "plain http, and nexo sends a token only over https",
        ),
        (
            "hd1",
            ServerConfig { headers: [("Host".into(), "x".into())].into(), ..http() },
            "`headers.Host` cannot be sent",
        ),
        (
            "hd2",
            ServerConfig { headers: [("x-a".into(), "1\n2".into())].into(), ..http() },
            "`headers.x-a` cannot be sent",
        ),
        (
            "hd3",
            ServerConfig { headers: [("X-A".into(), "1".into()), ("x-a".into(), "2".into())].into(), ..http() },
            "names `x-a` twice",
        ),
    ];
    for (name, config, says) in cases {
        let e = Server::new(name, config).unwrap_err();
        let shown = e.to_string();
        assert!(shown.starts_with(&format!("[mcp.{name}]: ")), "{shown}");
        assert!(shown.contains(says), "{name}: expected {says:?} in: {shown}");
        assert_eq!(e.server(), name);
    }
}

#[test]
fn good_tables_are_accepted_and_described() {
    let s = Server::new(
        "fs",
        ServerConfig {
            command: Some("node".into()),
            args: vec![
                "/very/long/path/to/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js".into(),
                "/data".into(),
            ],
            env: [("API_KEY".into(), "sk-env-secret".into())].into(),
            cwd: Some("/data".into()),
            confine: true,
            ..ServerConfig::default()
        },
    )
    .unwrap();
    assert_eq!(s.name(), "fs");
    assert_eq!(s.describe(), "stdio: node …/index.js /data (confined, no network; cwd /data; env API_KEY)");
    let proxied = Server::new(
        "gh",
        ServerConfig {
            net_hosts: vec!["api.github.com".into(), "example.com:8443".into()],
            ..ServerConfig {
                command: Some("gh-mcp".into()),
                cwd: Some("/data".into()),
                confine: true,
                ..Default::default()
            }
        },
    )
    .unwrap();
    assert_eq!(
        proxied.describe(),
        "stdio: gh-mcp (confined, network to api.github.com, example.com:8443 through nexo's egress proxy; cwd /data)"
    );
    assert!(proxied.has_net_hosts() && !s.has_net_hosts());
    assert!(!format!("{s:?}").contains("sk-env-secret"));

    let h = Server::new("gh", ServerConfig { token_env: Some("GH_TOKEN".into()), timeout: Some(5), ..http() }).unwrap();
    assert_eq!(h.describe(), "http: https://mcp.example.com/mcp (token from env GH_TOKEN)");
    assert_eq!(h.call_timeout().as_secs(), 5);
    assert_eq!(h.connect_timeout().as_secs(), 30);
    let t = Server::new("t", ServerConfig { token: Some("sk-static-secret".into()), ..http() }).unwrap();
    assert_eq!(t.describe(), "http: https://mcp.example.com/mcp (token from the config)");
    // Plain http with a token to the operator's own machine.
    let local = ServerConfig {
        url: Some("http://127.0.0.1:8080/mcp".into()),
        token_command: Some("pass show mcp".into()),
        allow_private: true,
        ..ServerConfig::default()
    };
    assert_eq!(
        Server::new("local", local).unwrap().describe(),
        "http: http://127.0.0.1:8080/mcp (token from token-command; private address allowed)"
    );
    // A query without credentials is fine.
    assert!(
        Server::new("q", ServerConfig { url: Some("https://h/mcp?region=eu".into()), ..ServerConfig::default() })
            .is_ok()
    );
}

#[test]
fn config_keys_are_kebab_case_and_unknown_keys_are_refused() {
    let c = parse(r#"{"url": "https://h/mcp", "token-env": "T", "allow-private": true, "connect-timeout": 5}"#);
    assert_eq!(c.token_env.as_deref(), Some("T"));
    assert!(c.allow_private);
    assert_eq!(c.connect_timeout, Some(5));
    let e = serde_json::from_str::<ServerConfig>(r#"{"url": "https://h/mcp", "tokn": "x"}"#).unwrap_err();
    assert!(e.to_string().contains("unknown field `tokn`"), "{e}");
    // Round trip, and Debug hides values that may be secrets.
    let c = ServerConfig {
        token: Some("sk-debug-secret".into()),
        env: [("K".into(), "sk-env-value".into())].into(),
        ..http()
    };
    let back: ServerConfig = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
    assert_eq!(back, c);
    let debug = format!("{c:?}");
    assert!(!debug.contains("sk-debug-secret") && !debug.contains("sk-env-value"), "{debug}");
}
