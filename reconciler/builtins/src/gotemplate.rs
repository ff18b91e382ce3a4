//! The subset of Go's `text/template` that upstream's Trustee templates use: `{{.Field}}`,
//! `{{if .Field}}`, `{{if eq .Field "literal"}}`, `{{else}}`, `{{end}}`. Rendering follows Go:
//! text between actions (newlines included) is copied as it is, a field is true when it is a
//! non-empty string. Anything else is an error naming the action.

use std::collections::BTreeMap;

enum Node {
    Text(String),
    Field(String),
    If {
        cond: Cond,
        then: Vec<Node>,
        otherwise: Vec<Node>,
    },
}

enum Cond {
    Set(String),
    Eq(String, String),
}

fn field(token: &str) -> Result<String, String> {
    token
        .strip_prefix('.')
        .filter(|f| !f.is_empty() && f.chars().all(|c| c.is_ascii_alphanumeric()))
        .map(str::to_string)
        .ok_or_else(|| format!("unsupported template field {token:?}"))
}

fn cond(args: &str) -> Result<Cond, String> {
    let words: Vec<&str> = args.split_whitespace().collect();
    match words.as_slice() {
        [f] => Ok(Cond::Set(field(f)?)),
        ["eq", f, lit] if lit.len() >= 2 && lit.starts_with('"') && lit.ends_with('"') => {
            Ok(Cond::Eq(field(f)?, lit[1..lit.len() - 1].to_string()))
        }
        _ => Err(format!("unsupported template condition {args:?}")),
    }
}

/// Parses until `{{end}}`/`{{else}}` (returned as the terminator) or the end of the text.
fn parse(rest: &mut &str) -> Result<(Vec<Node>, Option<&'static str>), String> {
    let mut nodes = Vec::new();
    loop {
        let Some(open) = rest.find("{{") else {
            if !rest.is_empty() {
                nodes.push(Node::Text((*rest).to_string()));
            }
            *rest = "";
            return Ok((nodes, None));
        };
        if open > 0 {
            nodes.push(Node::Text(rest[..open].to_string()));
        }
        let close = rest[open..]
            .find("}}")
            .ok_or("unterminated template action")?
            + open;
        let action = rest[open + 2..close].trim().to_string();
        *rest = &rest[close + 2..];
        match action.as_str() {
            "end" => return Ok((nodes, Some("end"))),
            "else" => return Ok((nodes, Some("else"))),
            a if a.starts_with("if ") => {
                let c = cond(&a[3..])?;
                let (then, term) = parse(rest)?;
                let otherwise = match term {
                    Some("end") => Vec::new(),
                    Some(_) => match parse(rest)? {
                        (o, Some("end")) => o,
                        _ => return Err(format!("{{{{{a}}}}} has no {{{{end}}}}")),
                    },
                    None => return Err(format!("{{{{{a}}}}} has no {{{{end}}}}")),
                };
                nodes.push(Node::If {
                    cond: c,
                    then,
                    otherwise,
                });
            }
            a => nodes.push(Node::Field(field(a)?)),
        }
    }
}

fn render_nodes(nodes: &[Node], data: &BTreeMap<&str, String>, out: &mut String) {
    let get = |f: &str| data.get(f).map_or("", String::as_str);
    for n in nodes {
        match n {
            Node::Text(t) => out.push_str(t),
            Node::Field(f) => out.push_str(get(f)),
            Node::If {
                cond,
                then,
                otherwise,
            } => {
                let holds = match cond {
                    Cond::Set(f) => !get(f).is_empty(),
                    Cond::Eq(f, lit) => get(f) == lit,
                };
                render_nodes(if holds { then } else { otherwise }, data, out);
            }
        }
    }
}

/// Renders `template` with `data` (missing fields are empty).
///
/// # Errors
/// An action outside the supported subset, or an unbalanced `if`/`end`.
pub fn render(template: &str, data: &BTreeMap<&str, String>) -> Result<String, String> {
    let mut rest = template;
    let (nodes, term) = parse(&mut rest)?;
    if let Some(t) = term {
        return Err(format!("unexpected {{{{{t}}}}}"));
    }
    let mut out = String::new();
    render_nodes(&nodes, data, &mut out);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_like_go_text_template() {
        let t = "a\n{{if .P}}\nx {{.P}}\n{{if eq .P \"c\"}}\nC{{if .M}}m={{.M}}{{end}}\n{{else}}\nD\n{{end}}\n{{end}}\nz";
        let mut d = BTreeMap::new();
        d.insert("P", "c".to_string());
        assert_eq!(render(t, &d).unwrap(), "a\n\nx c\n\nC\n\n\nz");
        d.insert("P", "i".to_string());
        assert_eq!(render(t, &d).unwrap(), "a\n\nx i\n\nD\n\n\nz");
        assert_eq!(render(t, &BTreeMap::new()).unwrap(), "a\n\nz");
        assert!(render("{{range .X}}", &d).is_err());
        assert!(render("{{if .X}}", &d).is_err());
    }
}
