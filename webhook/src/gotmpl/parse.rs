//! Go `text/template`'s parser: actions (`if`/`else if`/`else`, `with`,
//! `range`, `define`, `template`, `block`, `end`), pipelines with
//! declarations (`$x :=`, `$i, $v :=`) and assignments (`$x =`), commands
//! separated by `|`, operands with field chains (`.A.B`, `$x.A`,
//! `(pipe).A`).

use std::collections::HashMap;

use super::Error;
use super::lex::{Tok, Token};

/// A node of the tree.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// Text, written as is.
    Text(String),
    /// `{{ pipeline }}`: printed unless it declares or assigns.
    Action(Pipe),
    /// `{{ if }}`.
    If(Pipe, Vec<Node>, Vec<Node>),
    /// `{{ with }}`.
    With(Pipe, Vec<Node>, Vec<Node>),
    /// `{{ range }}`.
    Range(Pipe, Vec<Node>, Vec<Node>),
    /// `{{ template "name" pipeline }}`.
    Template(usize, String, Option<Pipe>),
}

/// A pipeline.
#[derive(Debug, Clone, PartialEq)]
pub struct Pipe {
    /// Its line, for errors.
    pub line: usize,
    /// Variables it declares or assigns.
    pub vars: Vec<String>,
    /// `=` rather than `:=`.
    pub assign: bool,
    /// Its commands; each one's value is the last argument of the next.
    pub cmds: Vec<Vec<Arg>>,
}

/// An operand.
#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    /// `.` with a field chain (empty: dot itself).
    Dot(Vec<String>),
    /// `$x` with a field chain.
    Var(String, Vec<String>),
    /// A function.
    Func(String),
    /// A string.
    Str(String),
    /// A number.
    Num(f64),
    /// A boolean.
    Bool(bool),
    /// `nil`.
    Nil,
    /// `(pipeline)` with a field chain.
    Paren(Box<Pipe>, Vec<String>),
}

/// A parsed template and the templates it defines.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tree {
    /// The main body.
    pub root: Vec<Node>,
    /// `define`d templates by name.
    pub defines: HashMap<String, Vec<Node>>,
}

struct Parser {
    toks: Vec<Token>,
    pos: usize,
    defines: HashMap<String, Vec<Node>>,
    /// Blocks and parentheses open now: bounded, so no input overflows
    /// the stack.
    depth: usize,
}

/// How deeply blocks and parentheses may nest.
const MAX_NESTING: usize = 100;

/// How a list ended.
enum Stop {
    Eof,
    End,
    Else,
    ElseIf(Pipe),
}

/// Parses the tokens of one template.
pub(super) fn parse(toks: Vec<Token>) -> Result<Tree, Error> {
    let mut p = Parser { toks, pos: 0, defines: HashMap::new(), depth: 0 };
    let (root, end) = p.list()?;
    match end {
        Stop::Eof => Ok(Tree { root, defines: p.defines }),
        _ => Err(Error::at(p.line(), "unexpected {{end}} or {{else}}")),
    }
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.toks.get(self.pos)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.toks.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn line(&self) -> usize {
        self.toks.get(self.pos.min(self.toks.len().saturating_sub(1))).map_or(0, |t| t.line)
    }

    fn expect_close(&mut self, what: &str) -> Result<(), Error> {
        match self.next() {
            Some(Token { tok: Tok::Close, .. }) => Ok(()),
            _ => Err(Error::at(self.line(), format!("unexpected input in {what}"))),
        }
    }

    /// Nodes up to `{{end}}`, `{{else}}` or the end.
    fn list(&mut self) -> Result<(Vec<Node>, Stop), Error> {
        self.depth += 1;
        let r = self.list_inner();
        self.depth -= 1;
        r
    }

    fn list_inner(&mut self) -> Result<(Vec<Node>, Stop), Error> {
        if self.depth > MAX_NESTING {
            return Err(Error::at(self.line(), format!("blocks nest deeper than {MAX_NESTING}")));
        }
        let mut out = Vec::new();
        while let Some(t) = self.next() {
            match t.tok {
                Tok::Text(s) => out.push(Node::Text(s)),
                Tok::Open => {
                    let line = t.line;
                    let keyword = match self.peek() {
                        Some(Token { tok: Tok::Ident(w), .. }) => Some(w.clone()),
                        _ => None,
                    };
                    match keyword.as_deref() {
                        Some("end") => {
                            self.pos += 1;
                            self.expect_close("end")?;
                            return Ok((out, Stop::End));
                        }
                        Some("else") => {
                            self.pos += 1;
                            if let Some(Token { tok: Tok::Ident(w), .. }) = self.peek()
                                && w == "if"
                            {
                                self.pos += 1;
                                let pipe = self.pipe(line, false)?;
                                return Ok((out, Stop::ElseIf(pipe)));
                            }
                            self.expect_close("else")?;
                            return Ok((out, Stop::Else));
                        }
                        Some(w @ ("if" | "with" | "range")) => {
                            let w = w.to_owned();
                            self.pos += 1;
                            let pipe = self.pipe(line, w == "range")?;
                            out.push(self.branch(&w, pipe)?);
                        }
                        Some("define") => {
                            self.pos += 1;
                            let name = self.name()?;
                            self.expect_close("define")?;
                            let (body, end) = self.list()?;
                            if !matches!(end, Stop::End) {
                                return Err(Error::at(line, "define without end"));
                            }
                            self.defines.insert(name, body);
                        }
                        Some("template") => {
                            self.pos += 1;
                            let name = self.name()?;
                            let pipe = match self.peek() {
                                Some(Token { tok: Tok::Close, .. }) => {
                                    self.pos += 1;
                                    None
                                }
                                _ => Some(self.pipe(line, false)?),
                            };
                            out.push(Node::Template(line, name, pipe));
                        }
                        Some("block") => {
                            self.pos += 1;
                            let name = self.name()?;
                            let pipe = self.pipe(line, false)?;
                            let (body, end) = self.list()?;
                            if !matches!(end, Stop::End) {
                                return Err(Error::at(line, "block without end"));
                            }
                            self.defines.entry(name.clone()).or_insert(body);
                            out.push(Node::Template(line, name, Some(pipe)));
                        }
                        Some(w @ ("break" | "continue")) => {
                            return Err(Error::at(line, format!("{{{{{w}}}}} is not supported")));
                        }
                        _ => out.push(Node::Action(self.pipe(line, false)?)),
                    }
                }
                _ => return Err(Error::at(t.line, "unexpected token outside an action")),
            }
        }
        Ok((out, Stop::Eof))
    }

    /// The rest of an `if`, `with` or `range` after its pipeline.
    fn branch(&mut self, keyword: &str, pipe: Pipe) -> Result<Node, Error> {
        let line = pipe.line;
        let (then, end) = self.list()?;
        let els = match end {
            Stop::End => Vec::new(),
            Stop::Else => {
                let (els, end) = self.list()?;
                if !matches!(end, Stop::End) {
                    return Err(Error::at(line, format!("{keyword} ... else without end")));
                }
                els
            }
            // `else if` is an `if` inside the else, sharing its end.
            Stop::ElseIf(p) => {
                self.depth += 1;
                let nested = if self.depth > MAX_NESTING {
                    Err(Error::at(line, format!("else if chains nest deeper than {MAX_NESTING}")))
                } else {
                    self.branch("if", p)
                };
                self.depth -= 1;
                vec![nested?]
            }
            Stop::Eof => return Err(Error::at(line, format!("unexpected EOF: {keyword} without end"))),
        };
        Ok(match keyword {
            "if" => Node::If(pipe, then, els),
            "with" => Node::With(pipe, then, els),
            _ => Node::Range(pipe, then, els),
        })
    }

    fn name(&mut self) -> Result<String, Error> {
        match self.next() {
            Some(Token { tok: Tok::Str(s), .. }) => Ok(s),
            _ => Err(Error::at(self.line(), "expected a quoted template name")),
        }
    }

    /// A pipeline up to `}}` (or `)` when `paren`), with its
    /// declarations. `range` may declare two variables.
    fn pipe(&mut self, line: usize, range: bool) -> Result<Pipe, Error> {
        self.pipe_until(line, range, false)
    }

    fn pipe_until(&mut self, line: usize, range: bool, paren: bool) -> Result<Pipe, Error> {
        let mut vars = Vec::new();
        let mut assign = false;
        // `$x :=`, `$x =`, `$i, $v :=`.
        let save = self.pos;
        if let Some(Token { tok: Tok::Var(v), .. }) = self.peek().cloned() {
            self.pos += 1;
            match self.peek().map(|t| t.tok.clone()) {
                Some(Tok::Declare) => {
                    self.pos += 1;
                    vars.push(v);
                }
                Some(Tok::Assign) => {
                    self.pos += 1;
                    vars.push(v);
                    assign = true;
                }
                Some(Tok::Comma) if range => {
                    self.pos += 1;
                    match (self.next().map(|t| t.tok), self.next().map(|t| t.tok)) {
                        (Some(Tok::Var(v2)), Some(Tok::Declare)) => vars.extend([v, v2]),
                        _ => return Err(Error::at(line, "range can only initialize variables")),
                    }
                }
                _ => self.pos = save,
            }
        }
        let mut cmds = Vec::new();
        let mut args = Vec::new();
        loop {
            let Some(t) = self.next() else { return Err(Error::at(line, "unclosed action")) };
            match t.tok {
                Tok::Close if !paren => break,
                Tok::RParen if paren => break,
                Tok::Close | Tok::RParen => return Err(Error::at(t.line, "unexpected delimiter in operand")),
                Tok::Pipe => {
                    if args.is_empty() {
                        return Err(Error::at(t.line, "missing command"));
                    }
                    cmds.push(std::mem::take(&mut args));
                }
                Tok::Dot => args.push(Arg::Dot(Vec::new())),
                Tok::Field(f) => {
                    let mut chain = vec![f];
                    chain.extend(self.chain());
                    args.push(Arg::Dot(chain));
                }
                Tok::Var(v) => {
                    let chain = self.chain();
                    args.push(Arg::Var(v, chain));
                }
                Tok::Ident(f) => args.push(Arg::Func(f)),
                Tok::Str(s) => args.push(Arg::Str(s)),
                Tok::Num(n) => args.push(Arg::Num(n)),
                Tok::Bool(b) => args.push(Arg::Bool(b)),
                Tok::Nil => args.push(Arg::Nil),
                Tok::LParen => {
                    if self.depth > MAX_NESTING {
                        return Err(Error::at(t.line, format!("parentheses nest deeper than {MAX_NESTING}")));
                    }
                    self.depth += 1;
                    let inner = self.pipe_until(t.line, false, true);
                    self.depth -= 1;
                    let inner = inner?;
                    let chain = self.chain();
                    args.push(Arg::Paren(Box::new(inner), chain));
                }
                Tok::Declare | Tok::Assign | Tok::Comma | Tok::Open | Tok::Text(_) => {
                    return Err(Error::at(t.line, "unexpected token in command"));
                }
            }
        }
        if !args.is_empty() {
            cmds.push(args);
        } else if !cmds.is_empty() {
            return Err(Error::at(line, "missing command"));
        }
        if cmds.is_empty() {
            return Err(Error::at(line, "missing value for command"));
        }
        Ok(Pipe { line, vars, assign, cmds })
    }

    /// Field names written right after an operand (`$x.A.B`, `(p).A`).
    fn chain(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(Token { tok: Tok::Field(f), spaced: false, .. }) = self.peek() {
            out.push(f.clone());
            self.pos += 1;
        }
        out
    }
}
