//! Go `text/template`'s lexer: text, and actions between `{{` and `}}`
//! with their trim markers (`{{- ` and ` -}}` trim the whitespace of the
//! text beside them) and comments (`{{/* ... */}}`). Inside an action:
//! identifiers and keywords, `.Field` chains, `$variables`, strings
//! (interpreted and raw), numbers, `(`, `)`, `|`, `:=`, `=`, `,`.
//! Newlines are allowed inside actions (Go 1.16).

use super::Error;

/// One token.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
    /// Text outside actions (already trimmed by the markers).
    Text(String),
    /// `{{` (a new action).
    Open,
    /// `}}`.
    Close,
    /// An identifier or keyword (`if`, `range`, a function name).
    Ident(String),
    /// `.Foo` (one element; `.Foo.Bar` is two).
    Field(String),
    /// `.` alone.
    Dot,
    /// `$name` (`$` alone is the root).
    Var(String),
    /// A string literal, unquoted.
    Str(String),
    /// A number literal.
    Num(f64),
    /// `true` or `false`.
    Bool(bool),
    /// `nil`.
    Nil,
    /// `(`.
    LParen,
    /// `)`.
    RParen,
    /// `|`.
    Pipe,
    /// `:=`.
    Declare,
    /// `=`.
    Assign,
    /// `,`.
    Comma,
}

/// A token with the line it starts on.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Token {
    /// What it is.
    pub tok: Tok,
    /// 1-based line.
    pub line: usize,
    /// Whether space came before it inside the action (`$x.F` is one
    /// operand, `$x .F` two).
    pub spaced: bool,
}

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

/// Splits `src` into tokens.
pub(super) fn lex(src: &str) -> Result<Vec<Token>, Error> {
    let mut out = Vec::new();
    let mut rest = src;
    let mut line = 1;
    let mut trim_next_text = false;
    loop {
        let Some(open) = rest.find("{{") else {
            let mut text = rest;
            if trim_next_text {
                text = text.trim_start_matches(is_space);
            }
            if !text.is_empty() {
                out.push(Token { tok: Tok::Text(text.to_owned()), line, spaced: false });
            }
            return Ok(out);
        };
        let mut text = &rest[..open];
        if trim_next_text {
            text = text.trim_start_matches(is_space);
        }
        let after = &rest[open + 2..];
        // `{{- ` trims the text before.
        let left_trim = after.starts_with('-') && after[1..].starts_with(is_space);
        if left_trim {
            text = text.trim_end_matches(is_space);
        }
        if !text.is_empty() {
            out.push(Token { tok: Tok::Text(text.to_owned()), line, spaced: false });
        }
        line += rest[..open].matches('\n').count();
        let mut body = if left_trim { &after[2..] } else { after };
        // A comment is the whole action.
        let trimmed = body.trim_start_matches(is_space);
        if trimmed.starts_with("/*") {
            let end = trimmed.find("*/").ok_or_else(|| Error::at(line, "unclosed comment"))?;
            let tail = &trimmed[end + 2..];
            let (right_trim, after_close) =
                close_of(tail).ok_or_else(|| Error::at(line, "comment ends before closing delimiter"))?;
            line += body[..body.len() - after_close.len()].matches('\n').count();
            trim_next_text = right_trim;
            rest = after_close;
            continue;
        }
        out.push(Token { tok: Tok::Open, line, spaced: false });
        // The action's tokens, up to `}}` or ` -}}`.
        loop {
            let skipped = body.len() - body.trim_start_matches(is_space).len();
            line += body[..skipped].matches('\n').count();
            let had_space = skipped > 0;
            body = &body[skipped..];
            if body.starts_with("}}") || (had_space && body.starts_with("-}}")) {
                let right_trim = body.starts_with('-');
                body = &body[if right_trim { 3 } else { 2 }..];
                out.push(Token { tok: Tok::Close, line, spaced: had_space });
                trim_next_text = right_trim;
                break;
            }
            let (tok, len) = token(body, line)?;
            out.push(Token { tok, line, spaced: had_space });
            body = &body[len..];
        }
        rest = body;
    }
}

/// The end of a comment: optional space, `}}` or ` -}}`; (right trim, rest).
fn close_of(s: &str) -> Option<(bool, &str)> {
    let t = s.trim_start_matches(is_space);
    if let Some(r) = t.strip_prefix("}}") {
        return Some((false, r));
    }
    if t.len() < s.len() {
        return t.strip_prefix("-}}").map(|r| (true, r));
    }
    None
}

fn ident_len(s: &str) -> usize {
    s.char_indices().find(|(_, c)| !(c.is_alphanumeric() || *c == '_')).map_or(s.len(), |(i, _)| i)
}

/// One token at the start of `s`: (token, bytes used).
fn token(s: &str, line: usize) -> Result<(Tok, usize), Error> {
    let c = s.chars().next().ok_or_else(|| Error::at(line, "unclosed action"))?;
    Ok(match c {
        '(' => (Tok::LParen, 1),
        ')' => (Tok::RParen, 1),
        '|' => (Tok::Pipe, 1),
        ',' => (Tok::Comma, 1),
        '=' => (Tok::Assign, 1),
        ':' if s.starts_with(":=") => (Tok::Declare, 2),
        '.' => {
            let n = ident_len(&s[1..]);
            if n == 0 {
                if s[1..].starts_with(|c: char| c.is_ascii_digit()) {
                    return number(s, line);
                }
                (Tok::Dot, 1)
            } else {
                (Tok::Field(s[1..1 + n].to_owned()), 1 + n)
            }
        }
        '$' => {
            let n = ident_len(&s[1..]);
            (Tok::Var(s[..1 + n].to_owned()), 1 + n)
        }
        '"' => {
            let mut out = String::new();
            let mut chars = s[1..].char_indices();
            loop {
                let Some((i, c)) = chars.next() else { return Err(Error::at(line, "unterminated quoted string")) };
                match c {
                    '"' => return Ok((Tok::Str(out), i + 2)),
                    '\n' => return Err(Error::at(line, "unterminated quoted string")),
                    '\\' => match chars.next().map(|(_, c)| c) {
                        Some('n') => out.push('\n'),
                        Some('t') => out.push('\t'),
                        Some('r') => out.push('\r'),
                        Some('\\') => out.push('\\'),
                        Some('"') => out.push('"'),
                        Some('\'') => out.push('\''),
                        Some(other) => return Err(Error::at(line, format!("unknown escape sequence: \\{other}"))),
                        None => return Err(Error::at(line, "unterminated quoted string")),
                    },
                    c => out.push(c),
                }
            }
        }
        '`' => {
            let end = s[1..].find('`').ok_or_else(|| Error::at(line, "unterminated raw quoted string"))?;
            (Tok::Str(s[1..1 + end].to_owned()), end + 2)
        }
        c if c.is_ascii_digit() || ((c == '-' || c == '+') && s[1..].starts_with(|d: char| d.is_ascii_digit())) => {
            return number(s, line);
        }
        c if c.is_alphabetic() || c == '_' => {
            let n = ident_len(s);
            let word = &s[..n];
            let tok = match word {
                "true" => Tok::Bool(true),
                "false" => Tok::Bool(false),
                "nil" => Tok::Nil,
                _ => Tok::Ident(word.to_owned()),
            };
            (tok, n)
        }
        other => return Err(Error::at(line, format!("unexpected {other:?} in command"))),
    })
}

fn number(s: &str, line: usize) -> Result<(Tok, usize), Error> {
    let n = s
        .char_indices()
        .skip(1)
        .find(|(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '-')))
        .map_or(s.len(), |(i, _)| i);
    let text = &s[..n];
    let v = if let Some(hex) = text.strip_prefix("0x") {
        i64::from_str_radix(hex, 16).map(|v| v as f64).ok()
    } else {
        text.replace('_', "").parse::<f64>().ok()
    };
    v.map(|v| (Tok::Num(v), n)).ok_or_else(|| Error::at(line, format!("bad number syntax: {text:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(src: &str) -> Vec<Tok> {
        lex(src).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn trim_markers_eat_whitespace_beside_them() {
        assert_eq!(
            toks("a  {{- .X -}}  b"),
            vec![Tok::Text("a".into()), Tok::Open, Tok::Field("X".into()), Tok::Close, Tok::Text("b".into())]
        );
        // A dash without its space is a number's sign, not a marker.
        assert_eq!(toks("{{-3}}"), vec![Tok::Open, Tok::Num(-3.0), Tok::Close]);
        assert_eq!(toks("x {{/* note */}} y"), vec![Tok::Text("x ".into()), Tok::Text(" y".into())]);
        assert_eq!(toks("x\n{{- /* note */ -}}\n y"), vec![Tok::Text("x".into()), Tok::Text("y".into())]);
    }

    #[test]
    fn action_tokens() {
        assert_eq!(
            toks("{{ $x := index .A `k\\n` \"q\\\"\" | default 1.5 }}"),
            vec![
                Tok::Open,
                Tok::Var("$x".into()),
                Tok::Declare,
                Tok::Ident("index".into()),
                Tok::Field("A".into()),
                Tok::Str("k\\n".into()),
                Tok::Str("q\"".into()),
                Tok::Pipe,
                Tok::Ident("default".into()),
                Tok::Num(1.5),
                Tok::Close
            ]
        );
        assert_eq!(
            toks("{{ (.A).B $ . }}")[1..6],
            [Tok::LParen, Tok::Field("A".into()), Tok::RParen, Tok::Field("B".into()), Tok::Var("$".into())]
        );
        assert!(lex("{{ .A ").is_err());
        assert!(lex("{{ \"open }}").is_err());
    }
}
