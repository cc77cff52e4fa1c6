//! A renderer of Go's `text/template`, for the injection templates of
//! Istio's chart (which the `gtmpl` crate cannot parse: they assign
//! variables and trim right after text). It follows Go's semantics where
//! the templates can see them:
//!
//! - data is JSON-like ([`Value`]); a missing map key is an *invalid*
//!   value (printed `<no value>`, false, and chains on it stay invalid),
//!   a field of `null` within a chain is an error, as Go's `nil pointer
//!   evaluating`, and a `null` a command yields becomes invalid (Go digs
//!   into the empty interface after each command);
//! - truth: false, 0, "", empty lists and maps, nil and invalid are false;
//! - `and`/`or` short-circuit and return the deciding value; `eq` takes
//!   several operands; `index` of a missing key is the map's zero value
//!   (`""` for string maps);
//! - numbers print as Go's `%v` of a float64 (`15020`, `1e+06`, `0.5`);
//!   maps print as `map[k:v]` in key order, lists as `[a b]`;
//! - `range` over a map goes in key order; `$x = v` assigns an outer
//!   variable (seen after the `range` or `if`), `$` is the root.
//!
//! Proto getters (`.GetFoo`) read field `Foo` and never fail on nil, and
//! `.String` of a string is the string, so the chart's calls on
//! `ProxyConfig` work on its JSON form.

mod lex;
mod parse;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;

pub use parse::Tree;
use parse::{Arg, Node, Pipe};

/// Why a template did not parse or render.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("template: {name}:{line}: {message}")]
pub struct Error {
    /// The template's name.
    pub name: String,
    /// The line.
    pub line: usize,
    /// What went wrong.
    pub message: String,
}

impl Error {
    fn at(line: usize, message: impl Into<String>) -> Self {
        Error { name: String::new(), line, message: message.into() }
    }
}

/// A template value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// What a missing key gives (Go's invalid `reflect.Value`).
    Invalid,
    /// `null`.
    Nil,
    /// A boolean.
    Bool(bool),
    /// A number (Go's JSON numbers are float64).
    Num(f64),
    /// A string.
    Str(String),
    /// A list, shared: reading a variable or a field copies a pointer,
    /// not the list (a pod's containers are read in loops over them).
    List(Arc<Vec<Value>>),
    /// A map, shared as lists are; `strings`: its values are strings (Go's
    /// `map[string]string`, whose missing keys `index` as `""`).
    Map(Arc<BTreeMap<String, Value>>, bool),
}

impl From<&serde_json::Value> for Value {
    fn from(v: &serde_json::Value) -> Self {
        match v {
            serde_json::Value::Null => Value::Nil,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => Value::Num(n.as_f64().unwrap_or(0.0)),
            serde_json::Value::String(s) => Value::Str(s.clone()),
            serde_json::Value::Array(a) => Value::List(Arc::new(a.iter().map(Value::from).collect())),
            serde_json::Value::Object(m) => {
                let strings = !m.is_empty() && m.values().all(serde_json::Value::is_string);
                Value::Map(Arc::new(m.iter().map(|(k, v)| (k.clone(), Value::from(v))).collect()), strings)
            }
        }
    }
}

impl Value {
    /// A string map (Go's `map[string]string`: labels, annotations).
    pub fn string_map(m: &BTreeMap<String, String>) -> Value {
        Value::Map(Arc::new(m.iter().map(|(k, v)| (k.clone(), Value::Str(v.clone()))).collect()), true)
    }

    /// Go's truth.
    pub fn truthy(&self) -> bool {
        match self {
            Value::Invalid | Value::Nil => false,
            Value::Bool(b) => *b,
            Value::Num(n) => *n != 0.0,
            Value::Str(s) => !s.is_empty(),
            Value::List(l) => !l.is_empty(),
            Value::Map(m, _) => !m.is_empty(),
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// As JSON (invalid is null).
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Invalid | Value::Nil => serde_json::Value::Null,
            Value::Bool(b) => (*b).into(),
            Value::Num(n) if n.fract() == 0.0 && n.abs() < 9.0e15 => (*n as i64).into(),
            Value::Num(n) => serde_json::Number::from_f64(*n).map_or(serde_json::Value::Null, Into::into),
            Value::Str(s) => s.clone().into(),
            Value::List(l) => l.iter().map(Value::to_json).collect(),
            Value::Map(m, _) => m.iter().map(|(k, v)| (k.clone(), v.to_json())).collect(),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Value::Invalid => "invalid",
            Value::Nil => "nil",
            Value::Bool(_) => "bool",
            Value::Num(_) => "float64",
            Value::Str(_) => "string",
            Value::List(_) => "slice",
            Value::Map(..) => "map",
        }
    }
}

/// Go's `%v` of a float64.
pub fn format_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf".into() } else { "-Inf".into() };
    }
    if f == 0.0 {
        return "0".into();
    }
    // The shortest digits and their exponent, as Rust finds them; Go's
    // %v is strconv's 'g' with the shortest precision, which switches to
    // the exponent form below 1e-4 and from 1e+06.
    let e = format!("{f:e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        return go_exp(mantissa, exp);
    }
    format!("{f}")
}

fn go_exp(mantissa: &str, exp: i32) -> String {
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exp.abs())
}

/// Go's `fmt.Sprint` of a value, as `{{ }}` prints it.
pub fn print(v: &Value) -> String {
    let mut out = String::new();
    print_into(&mut out, v, true);
    out
}

fn print_into(out: &mut String, v: &Value, _top: bool) {
    match v {
        Value::Invalid => out.push_str("<no value>"),
        Value::Nil => out.push_str("<nil>"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Num(n) => out.push_str(&format_float(*n)),
        Value::Str(s) => out.push_str(s),
        Value::List(l) => {
            out.push('[');
            for (i, e) in l.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                print_into(out, e, false);
            }
            out.push(']');
        }
        Value::Map(m, _) => {
            out.push_str("map[");
            for (i, (k, e)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                let _ = write!(out, "{k}:");
                print_into(out, e, false);
            }
            out.push(']');
        }
    }
}

/// A function the templates may call: the evaluated arguments, or an
/// error message.
/// The arguments are the function's own: one may take a value out
/// (`append` grows the list it was given when nothing else holds it).
pub type Func = fn(&mut [Value]) -> Result<Value, String>;

/// A parsed template with its functions.
#[derive(Debug)]
pub struct Template {
    name: String,
    tree: Tree,
    funcs: HashMap<&'static str, Func>,
}

/// Builtin names handled by the evaluator itself.
const BUILTINS: [&str; 12] = ["and", "or", "not", "eq", "ne", "lt", "le", "gt", "ge", "len", "index", "printf"];

impl Template {
    /// Parses `src`; a call of a function that is neither a builtin nor in
    /// `funcs` fails here, as in Go.
    pub fn parse(name: &str, src: &str, funcs: HashMap<&'static str, Func>) -> Result<Template, Error> {
        let named = |mut e: Error| {
            e.name = name.to_owned();
            e
        };
        let tree = parse::parse(lex::lex(src).map_err(named)?).map_err(named)?;
        let t = Template { name: name.to_owned(), tree, funcs };
        t.check_funcs(&t.tree.root).map_err(named)?;
        for body in t.tree.defines.values() {
            t.check_funcs(body).map_err(named)?;
        }
        Ok(t)
    }

    fn check_funcs(&self, nodes: &[Node]) -> Result<(), Error> {
        fn pipe_funcs<'a>(p: &'a Pipe, out: &mut Vec<(&'a str, usize)>) {
            for cmd in &p.cmds {
                for a in cmd {
                    match a {
                        Arg::Func(f) => out.push((f, p.line)),
                        Arg::Paren(inner, _) => pipe_funcs(inner, out),
                        _ => {}
                    }
                }
            }
        }
        for n in nodes {
            let mut names = Vec::new();
            match n {
                Node::Text(_) => {}
                Node::Action(p) => pipe_funcs(p, &mut names),
                Node::If(p, a, b) | Node::With(p, a, b) | Node::Range(p, a, b) => {
                    pipe_funcs(p, &mut names);
                    self.check_funcs(a)?;
                    self.check_funcs(b)?;
                }
                Node::Template(_, _, p) => {
                    if let Some(p) = p {
                        pipe_funcs(p, &mut names);
                    }
                }
            }
            for (f, line) in names {
                if !BUILTINS.contains(&f) && !self.funcs.contains_key(f) {
                    return Err(Error::at(line, format!("function {f:?} not defined")));
                }
            }
        }
        Ok(())
    }

    /// Renders with `data` as dot.
    pub fn render(&self, data: &Value) -> Result<String, Error> {
        self.render_until(data, None)
    }

    /// [`Template::render`], failing once `deadline` has passed (checked
    /// every few thousand steps), so a render nobody waits for any more
    /// stops and frees its thread.
    pub fn render_until(&self, data: &Value, deadline: Option<std::time::Instant>) -> Result<String, Error> {
        let mut st = State {
            t: self,
            vars: vec![("$".to_owned(), data.clone())],
            out: String::new(),
            depth: 0,
            steps: 0,
            deadline,
            take: None,
        };
        st.walk(&self.tree.root, data).map_err(|mut e| {
            e.name = self.name.clone();
            e
        })?;
        Ok(st.out)
    }
}

struct State<'a> {
    t: &'a Template,
    vars: Vec<(String, Value)>,
    out: String,
    depth: usize,
    steps: usize,
    deadline: Option<std::time::Instant>,
    /// The variable whose one use in the pipeline being evaluated takes
    /// its value (the pipeline assigns it anew): see [`State::pipe`].
    take: Option<String>,
}

/// How many times `$name` is read in `p`, nested pipelines included.
fn uses(p: &Pipe, name: &str) -> usize {
    p.cmds
        .iter()
        .flatten()
        .map(|a| match a {
            Arg::Var(v, _) => usize::from(v == name),
            Arg::Paren(inner, _) => uses(inner, name),
            _ => 0,
        })
        .sum()
}

/// How deep `template` calls may nest.
const MAX_DEPTH: usize = 100;
/// Steps (nodes and iterations) one render may take, and bytes it may
/// write: a template that would loop or grow without end fails instead.
const MAX_STEPS: usize = 5_000_000;
const MAX_OUTPUT: usize = 8 << 20;
/// Steps between two looks at the clock.
const DEADLINE_EVERY: usize = 4096;

impl State<'_> {
    fn step(&mut self, line: usize) -> Result<(), Error> {
        self.steps += 1;
        if self.steps > MAX_STEPS {
            return Err(Error::at(line, format!("the template took more than {MAX_STEPS} steps")));
        }
        if self.out.len() > MAX_OUTPUT {
            return Err(Error::at(line, format!("the template wrote more than {MAX_OUTPUT} bytes")));
        }
        if self.steps.is_multiple_of(DEADLINE_EVERY) && self.deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            return Err(Error::at(line, format!("the template ran out of time after {} steps", self.steps)));
        }
        Ok(())
    }

    fn walk(&mut self, nodes: &[Node], dot: &Value) -> Result<(), Error> {
        for n in nodes {
            let line = match n {
                Node::Action(p) | Node::If(p, ..) | Node::With(p, ..) | Node::Range(p, ..) => p.line,
                Node::Template(line, ..) => *line,
                Node::Text(_) => 0,
            };
            self.step(line)?;
            match n {
                Node::Text(s) => self.out.push_str(s),
                Node::Action(p) => {
                    let v = self.pipe(p, dot)?;
                    if p.vars.is_empty() {
                        print_into(&mut self.out, &v, true);
                    }
                }
                Node::If(p, then, els) => {
                    let mark = self.vars.len();
                    let v = self.pipe(p, dot)?;
                    let r = if v.truthy() { self.walk(then, dot) } else { self.walk(els, dot) };
                    self.vars.truncate(mark);
                    r?;
                }
                Node::With(p, then, els) => {
                    let mark = self.vars.len();
                    let v = self.pipe(p, dot)?;
                    let r = if v.truthy() { self.walk(then, &v) } else { self.walk(els, dot) };
                    self.vars.truncate(mark);
                    r?;
                }
                Node::Range(p, body, els) => {
                    let mark = self.vars.len();
                    let decl = Pipe { vars: Vec::new(), assign: false, ..p.clone() };
                    let v = self.pipe(&decl, dot)?;
                    let items: Vec<(Value, Value)> = match v {
                        Value::Invalid | Value::Nil => Vec::new(),
                        Value::List(l) => {
                            l.iter().enumerate().map(|(i, e)| (Value::Num(i as f64), e.clone())).collect()
                        }
                        Value::Map(m, _) => m.iter().map(|(k, e)| (Value::Str(k.clone()), e.clone())).collect(),
                        Value::Num(n) if n >= 0.0 && n.fract() == 0.0 && n <= MAX_STEPS as f64 => {
                            (0..n as i64).map(|i| (Value::Num(i as f64), Value::Num(i as f64))).collect()
                        }
                        other => return Err(Error::at(p.line, format!("range can't iterate over {}", print(&other)))),
                    };
                    if items.is_empty() {
                        self.walk(els, dot)?;
                    }
                    for (k, e) in items {
                        self.step(p.line)?;
                        let inner = self.vars.len();
                        match p.vars.as_slice() {
                            [v] => self.vars.push((v.clone(), e.clone())),
                            [i, v] => {
                                self.vars.push((i.clone(), k));
                                self.vars.push((v.clone(), e.clone()));
                            }
                            _ => {}
                        }
                        self.walk(body, &e)?;
                        self.vars.truncate(inner);
                    }
                    self.vars.truncate(mark);
                }
                Node::Template(line, name, p) => {
                    let body = self
                        .t
                        .tree
                        .defines
                        .get(name)
                        .ok_or_else(|| Error::at(*line, format!("no such template {name:?}")))?;
                    let arg = match p {
                        Some(p) => self.pipe(p, dot)?,
                        // Go evaluates an absent pipeline to an invalid dot.
                        None => Value::Invalid,
                    };
                    if self.depth >= MAX_DEPTH {
                        return Err(Error::at(*line, "exceeded maximum template depth"));
                    }
                    // A template sees only its own `$`.
                    let saved = std::mem::replace(&mut self.vars, vec![("$".to_owned(), arg.clone())]);
                    self.depth += 1;
                    let r = self.walk(body, &arg);
                    self.depth -= 1;
                    self.vars = saved;
                    r?;
                }
            }
        }
        Ok(())
    }

    fn var(&self, name: &str, line: usize) -> Result<Value, Error> {
        self.vars
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| Error::at(line, format!("undefined variable: {name}")))
    }

    fn pipe(&mut self, p: &Pipe, dot: &Value) -> Result<Value, Error> {
        // `$x = f $x …` with one read of `$x`: its old value dies with the
        // assignment, so that read takes it instead of sharing it. A list
        // appended to in a loop (`$c = append $c .Name`, the chart's) then
        // grows in place, linear as in Go, not copied at each step.
        let outer = self.take.take();
        self.take = match (p.vars.as_slice(), p.assign) {
            ([name], true) if uses(p, name) == 1 => Some(name.clone()),
            _ => None,
        };
        let r = self.pipe_inner(p, dot);
        self.take = outer;
        r
    }

    fn pipe_inner(&mut self, p: &Pipe, dot: &Value) -> Result<Value, Error> {
        let mut last: Option<Value> = None;
        for cmd in &p.cmds {
            // Go's evalPipeline digs into an empty interface after each
            // command: a nil there is an invalid value from then on.
            last = Some(match self.command(cmd, dot, last, p.line)? {
                Value::Nil => Value::Invalid,
                v => v,
            });
        }
        let v = last.unwrap_or(Value::Invalid);
        match (p.vars.as_slice(), p.assign) {
            ([name], true) => {
                let slot = self
                    .vars
                    .iter_mut()
                    .rev()
                    .find(|(n, _)| n == name)
                    .ok_or_else(|| Error::at(p.line, format!("undefined variable: {name}")))?;
                slot.1 = v.clone();
            }
            ([name], false) => self.vars.push((name.clone(), v.clone())),
            _ => {}
        }
        Ok(v)
    }

    fn command(&mut self, cmd: &[Arg], dot: &Value, piped: Option<Value>, line: usize) -> Result<Value, Error> {
        let (first, rest) = cmd.split_first().ok_or_else(|| Error::at(line, "empty command"))?;
        let Arg::Func(name) = first else {
            if !rest.is_empty() || piped.is_some() {
                return Err(Error::at(line, "can't give argument to non-function"));
            }
            return self.arg(first, dot, line);
        };
        // and/or short-circuit.
        if name == "and" || name == "or" {
            let mut v = Value::Invalid;
            let count = rest.len() + usize::from(piped.is_some());
            if count == 0 {
                return Err(Error::at(line, format!("wrong number of args for {name}: want at least 1 got 0")));
            }
            for a in rest {
                v = self.arg(a, dot, line)?;
                if v.truthy() == (name == "or") {
                    return Ok(v);
                }
            }
            if let Some(p) = piped {
                v = p;
            }
            return Ok(v);
        }
        let mut args = Vec::with_capacity(rest.len() + 1);
        for a in rest {
            args.push(self.arg(a, dot, line)?);
        }
        if let Some(p) = piped {
            args.push(p);
        }
        builtin(name, &args)
            .unwrap_or_else(|| {
                let f = self.t.funcs.get(name.as_str()).ok_or_else(|| format!("function {name:?} not defined"))?;
                f(&mut args)
            })
            .map_err(|m| Error::at(line, format!("error calling {name}: {m}")))
    }

    fn arg(&mut self, a: &Arg, dot: &Value, line: usize) -> Result<Value, Error> {
        let (base, chain) = match a {
            Arg::Dot(chain) => (dot.clone(), chain),
            Arg::Var(v, chain) if chain.is_empty() && self.take.as_ref() == Some(v) => {
                self.take = None;
                let slot = self
                    .vars
                    .iter_mut()
                    .rev()
                    .find(|(n, _)| n == v)
                    .ok_or_else(|| Error::at(line, format!("undefined variable: {v}")))?;
                return Ok(std::mem::replace(&mut slot.1, Value::Invalid));
            }
            Arg::Var(v, chain) => (self.var(v, line)?, chain),
            Arg::Str(s) => return Ok(Value::Str(s.clone())),
            Arg::Num(n) => return Ok(Value::Num(*n)),
            Arg::Bool(b) => return Ok(Value::Bool(*b)),
            Arg::Nil => return Err(Error::at(line, "nil is not a command")),
            Arg::Func(f) => {
                return builtin(f, &[])
                    .unwrap_or_else(|| {
                        let func = self.t.funcs.get(f.as_str()).ok_or_else(|| format!("function {f:?} not defined"))?;
                        func(&mut [])
                    })
                    .map_err(|m| Error::at(line, format!("error calling {f}: {m}")));
            }
            Arg::Paren(p, chain) => (self.pipe(p, dot)?, chain),
        };
        let mut v = base;
        for f in chain {
            v = field(&v, f).map_err(|m| Error::at(line, m))?;
        }
        Ok(v)
    }
}

/// `.name` of `v`.
fn field(v: &Value, name: &str) -> Result<Value, String> {
    // Proto getters: `.GetFoo` reads `Foo` and is nil-safe.
    let getter = name.strip_prefix("Get").filter(|f| f.starts_with(|c: char| c.is_ascii_uppercase()));
    match v {
        Value::Map(m, _) => match m.get(name) {
            Some(x) => Ok(x.clone()),
            None => Ok(getter
                .and_then(|g| {
                    // The JSON form of a proto field is lowerCamel.
                    let mut chars = g.chars();
                    let lower: String = chars.next().map(|c| c.to_ascii_lowercase()).into_iter().chain(chars).collect();
                    m.get(g).or_else(|| m.get(&lower)).cloned()
                })
                .unwrap_or(Value::Invalid)),
        },
        Value::Invalid => Ok(Value::Invalid),
        Value::Nil if getter.is_some() => Ok(Value::Invalid),
        Value::Nil => Err(format!("nil pointer evaluating interface {{}}.{name}")),
        Value::Str(s) if name == "String" => Ok(Value::Str(s.clone())),
        // A wrapper type's `GetValue` (`BoolValue`, `Int32Value`): the
        // JSON form holds the bare value.
        Value::Bool(_) | Value::Num(_) if name == "GetValue" => Ok(v.clone()),
        other => Err(format!("can't evaluate field {name} in type {}", other.kind())),
    }
}

/// The builtins other than `and`/`or`; `None` when `name` is not one.
fn builtin(name: &str, args: &[Value]) -> Option<Result<Value, String>> {
    Some(match name {
        "not" => match args {
            [a] => Ok(Value::Bool(!a.truthy())),
            _ => Err(format!("wrong number of args for not: want 1 got {}", args.len())),
        },
        "eq" => eq(args).map(Value::Bool),
        "ne" => match args {
            [a, b] => basic_eq(a, b).map(|e| Value::Bool(!e)),
            _ => Err(format!("wrong number of args for ne: want 2 got {}", args.len())),
        },
        "lt" | "le" | "gt" | "ge" => compare(name, args),
        "len" => match args {
            [Value::Str(s)] => Ok(Value::Num(s.len() as f64)),
            [Value::List(l)] => Ok(Value::Num(l.len() as f64)),
            [Value::Map(m, _)] => Ok(Value::Num(m.len() as f64)),
            [other] => Err(format!("len of type {}", other.kind())),
            _ => Err(format!("wrong number of args for len: want 1 got {}", args.len())),
        },
        "index" => index(args),
        "printf" => match args.split_first() {
            Some((Value::Str(f), rest)) => Ok(Value::Str(sprintf(f, rest))),
            _ => Err("printf needs a format string".into()),
        },
        _ => return None,
    })
}

fn basic_eq(a: &Value, b: &Value) -> Result<bool, String> {
    match (a, b) {
        (Value::Bool(x), Value::Bool(y)) => Ok(x == y),
        (Value::Num(x), Value::Num(y)) => Ok(x == y),
        (Value::Str(x), Value::Str(y)) => Ok(x == y),
        (Value::Invalid | Value::Nil, Value::Invalid | Value::Nil) => Ok(true),
        (Value::Invalid | Value::Nil, _) | (_, Value::Invalid | Value::Nil) => Ok(false),
        (Value::List(_) | Value::Map(..), _) | (_, Value::List(_) | Value::Map(..)) => {
            Err("invalid type for comparison".into())
        }
        _ => Err("incompatible types for comparison".into()),
    }
}

fn eq(args: &[Value]) -> Result<bool, String> {
    let (first, rest) = args.split_first().ok_or("missing argument for comparison")?;
    if rest.is_empty() {
        return Err("missing argument for comparison".into());
    }
    for b in rest {
        if basic_eq(first, b)? {
            return Ok(true);
        }
    }
    Ok(false)
}

fn compare(name: &str, args: &[Value]) -> Result<Value, String> {
    let [a, b] = args else { return Err(format!("wrong number of args for {name}: want 2 got {}", args.len())) };
    let ord = match (a, b) {
        (Value::Num(x), Value::Num(y)) => x.partial_cmp(y),
        (Value::Str(x), Value::Str(y)) => Some(x.cmp(y)),
        _ => return Err("invalid type for comparison".into()),
    }
    .ok_or("invalid comparison")?;
    use std::cmp::Ordering::*;
    Ok(Value::Bool(match name {
        "lt" => ord == Less,
        "le" => ord != Greater,
        "gt" => ord == Greater,
        _ => ord != Less,
    }))
}

fn index(args: &[Value]) -> Result<Value, String> {
    let (base, keys) = args.split_first().ok_or("wrong number of args for index: want at least 1 got 0")?;
    let mut v = base.clone();
    for k in keys {
        v = match (&v, k) {
            (Value::Map(m, strings), Value::Str(key)) => match m.get(key) {
                Some(x) => x.clone(),
                None if *strings => Value::Str(String::new()),
                None => Value::Nil,
            },
            (Value::List(l), Value::Num(i)) => {
                let i = *i as usize;
                l.get(i).cloned().ok_or_else(|| format!("error calling index: index out of range: {i}"))?
            }
            (Value::Invalid, _) => return Err("index of untyped nil".into()),
            (Value::Nil, _) => return Err("index of nil pointer".into()),
            (other, key) => return Err(format!("can't index item of type {} with {}", other.kind(), key.kind())),
        };
    }
    Ok(v)
}

/// Go's `fmt.Sprintf` for the verbs the templates use: `%s`, `%v`, `%d`,
/// `%t`, `%q`, `%%`.
pub fn sprintf(format: &str, args: &[Value]) -> String {
    let mut out = String::new();
    let mut args = args.iter();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let Some(verb) = chars.next() else {
            out.push_str("%!(NOVERB)");
            break;
        };
        if verb == '%' {
            out.push('%');
            continue;
        }
        let Some(a) = args.next() else {
            let _ = write!(out, "%!{verb}(MISSING)");
            continue;
        };
        match (verb, a) {
            ('d', Value::Num(n)) if n.fract() == 0.0 => {
                let _ = write!(out, "{}", *n as i64);
            }
            ('q', Value::Str(s)) => out.push_str(&serde_json::Value::String(s.clone()).to_string()),
            ('s' | 'v' | 't' | 'd' | 'q', a) => print_into(&mut out, a, true),
            (verb, a) => {
                let _ = write!(out, "%!{verb}({})", print(a));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
