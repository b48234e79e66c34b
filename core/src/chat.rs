//! Chat templates: the Jinja template a model ships (tokenizer_config.json `chat_template` or
//! GGUF `tokenizer.chat_template`) rendered with minijinja the way transformers'
//! `apply_chat_template` renders it (trim_blocks, lstrip_blocks, loop controls, Python string
//! methods, `raise_exception`, `strftime_now`, a Python-compatible `tojson`).

use std::fmt;

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{context, Environment, ErrorKind};
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// One turn of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }
}

const TEMPLATE_NAME: &str = "chat_template";

/// ChatML, for models that ship no template.
const CHATML: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// Gemma's turns, for Gemma vocabularies whose file ships no template (as Google's template
/// renders string contents: BOS, a system message as the first user turn's prefix, roles
/// alternating from the user, the assistant called "model").
const GEMMA: &str = "{{ bos_token }}{% if messages and messages[0]['role'] == 'system' %}{% set prefix = messages[0]['content'] + '\n\n' %}{% set loop_messages = messages[1:] %}{% else %}{% set prefix = '' %}{% set loop_messages = messages %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}{{ '<start_of_turn>' + role + '\n' + (prefix if loop.first else '') + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}";

/// A compiled chat template with the special-token strings it may refer to.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
    /// The date `strftime_now` formats: (year, month 1-12, day 1-31).
    date: (i32, u32, u32),
}

impl fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .field("date", &self.date)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compiles a template once; syntax errors name the line.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<ChatTemplate> {
        let mut env = Environment::new();
        // transformers renders with trim_blocks and lstrip_blocks; templates are written for it.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_filter("tojson", tojson);
        env.add_template_owned(TEMPLATE_NAME, source.to_string())
            .map_err(template_error)?;
        Ok(ChatTemplate {
            env,
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
            date: today(),
        })
    }

    /// The ChatML template (`<|im_start|>role\ncontent<|im_end|>\n`), for models without one.
    pub fn chatml() -> ChatTemplate {
        // The source is ours and known to compile; failing here is a bug in this file.
        ChatTemplate::new(CHATML, "", "<|im_end|>").expect("the built-in ChatML template compiles")
    }

    /// Gemma's turn format (`<start_of_turn>role\ncontent<end_of_turn>\n`), for Gemma models
    /// without a template.
    pub fn gemma(bos_token: &str) -> ChatTemplate {
        // The source is ours and known to compile; failing here is a bug in this file.
        ChatTemplate::new(GEMMA, bos_token, "<end_of_turn>")
            .expect("the built-in Gemma template compiles")
    }

    /// Pins the date `strftime_now` reports (the default is today's UTC date; in the browser,
    /// where core cannot read a clock, 2024-01-01 unless pinned).
    pub fn with_date(mut self, year: i32, month: u32, day: u32) -> ChatTemplate {
        self.date = (year, month.clamp(1, 12), day.clamp(1, 31));
        self
    }

    /// Renders the whole conversation; `add_generation_prompt` appends the assistant header.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(template_error)?;
        let date = self.date;
        let strftime_now = Value::from_function(move |format: String| strftime(&format, date));
        template
            .render(context! {
                messages => messages,
                add_generation_prompt => add_generation_prompt,
                bos_token => self.bos_token.as_str(),
                eos_token => self.eos_token.as_str(),
                // transformers passes these explicitly as None when unused.
                tools => Value::from(()),
                documents => Value::from(()),
                strftime_now => strftime_now,
            })
            .map_err(template_error)
    }
}

fn template_error(e: minijinja::Error) -> Error {
    let mut message = match e.line() {
        Some(line) => format!("line {line}: {e}"),
        None => e.to_string(),
    };
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        message.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    Error::Template(message)
}

/// `raise_exception(message)`: templates call it to reject a conversation (e.g. roles that do
/// not alternate); it becomes an [`Error::Template`] carrying the message.
fn raise_exception(message: String) -> std::result::Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
}

/// transformers' `tojson`: Python `json.dumps(x, ensure_ascii=False, indent=indent)`, so
/// `", "` and `": "` separators and no HTML escaping (minijinja's own filter escapes `<` etc.).
fn tojson(value: Value, kwargs: Kwargs) -> std::result::Result<Value, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    // Accepted for compatibility; Python's defaults are what we produce anyway.
    let _: Option<bool> = kwargs.get("ensure_ascii")?;
    let _: Option<bool> = kwargs.get("sort_keys")?;
    kwargs.assert_all_used()?;
    let mut out = String::new();
    write_json(&value, indent, 0, &mut out)?;
    Ok(Value::from_safe_string(out))
}

fn write_json(
    value: &Value,
    indent: Option<usize>,
    level: usize,
    out: &mut String,
) -> std::result::Result<(), minijinja::Error> {
    match value.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if let Some(i) = value.as_i64().filter(|_| value.is_integer()) {
                out.push_str(&i.to_string());
            } else {
                match f64::try_from(value.clone()) {
                    Ok(f) if f.is_finite() => out.push_str(&format!("{f:?}")),
                    Ok(f) if f.is_nan() => out.push_str("NaN"),
                    Ok(f) if f > 0.0 => out.push_str("Infinity"),
                    Ok(_) => out.push_str("-Infinity"),
                    Err(_) => out.push_str(&value.to_string()),
                }
            }
        }
        ValueKind::String | ValueKind::Bytes => write_json_string(&value.to_string(), out),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            write_json_container(('[', ']'), &items, indent, level, out, |item, out| {
                write_json(item, indent, level + 1, out)
            })?;
        }
        // Keys come in minijinja's map order (sorted), where Python would keep insertion order.
        ValueKind::Map => {
            let keys: Vec<Value> = value.try_iter()?.collect();
            write_json_container(('{', '}'), &keys, indent, level, out, |key, out| {
                write_json_string(&key.to_string(), out);
                out.push_str(": ");
                write_json(&value.get_item(key)?, indent, level + 1, out)
            })?;
        }
        _ => {
            return Err(minijinja::Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: cannot serialize a {} value", value.kind()),
            ))
        }
    }
    Ok(())
}

/// Brackets, separators and (with `indent`) Python's line breaks around a list or dict.
fn write_json_container(
    (open, close): (char, char),
    items: &[Value],
    indent: Option<usize>,
    level: usize,
    out: &mut String,
    mut write_item: impl FnMut(&Value, &mut String) -> std::result::Result<(), minijinja::Error>,
) -> std::result::Result<(), minijinja::Error> {
    let newline = |out: &mut String, level: usize| {
        if let Some(width) = indent {
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', width * level));
        }
    };
    out.push(open);
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(if indent.is_some() { "," } else { ", " });
        }
        newline(out, level + 1);
        write_item(item, out)?;
    }
    if !items.is_empty() {
        newline(out, level);
    }
    out.push(close);
    Ok(())
}

fn write_json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Today's UTC date. wasm32-unknown-unknown has no clock in std (SystemTime::now panics there).
fn today() -> (i32, u32, u32) {
    #[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
    {
        if let Ok(since_epoch) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)
        {
            return civil_from_days((since_epoch.as_secs() / 86_400) as i64);
        }
    }
    // 19_723 days after the epoch: 2024-01-01.
    civil_from_days(19_723)
}

/// Days since 1970-01-01 -> (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i32, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = (yoe + era * 400 + i64::from(month <= 2)) as i32;
    (year, month, day)
}

/// Python's `strftime` for the date fields templates use (`%d %b %Y`, `%Y-%m-%d`, `%B %-d`...);
/// the time of day is midnight.
fn strftime(format: &str, (year, month, day): (i32, u32, u32)) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const WEEKDAYS: [&str; 7] = [
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
    ];
    let month_name = MONTHS[(month.clamp(1, 12) - 1) as usize];
    // 1970-01-01 was a Thursday (index 3 from Monday).
    let weekday = WEEKDAYS[(days_from_civil(year, month, day) + 3).rem_euclid(7) as usize];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut spec = chars.next();
        let no_pad = spec == Some('-');
        if no_pad {
            spec = chars.next();
        }
        let two = |n: u32| {
            if no_pad {
                n.to_string()
            } else {
                format!("{n:02}")
            }
        };
        match spec {
            Some('d') => out.push_str(&two(day)),
            Some('m') => out.push_str(&two(month)),
            Some('Y') => out.push_str(&year.to_string()),
            Some('y') => out.push_str(&two(year.rem_euclid(100) as u32)),
            Some('B') => out.push_str(month_name),
            Some('b') | Some('h') => out.push_str(&month_name[..3]),
            Some('A') => out.push_str(weekday),
            Some('a') => out.push_str(&weekday[..3]),
            Some('H') | Some('M') | Some('S') => out.push_str(&two(0)),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                if no_pad {
                    out.push('-');
                }
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

fn days_from_civil(year: i32, month: u32, day: u32) -> i64 {
    let y = i64::from(year) - i64::from(month <= 2);
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calendar_round_trips() {
        for days in [-800_000i64, -1, 0, 1, 19_723, 20_000, 2_000_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "days={days}");
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
    }

    #[test]
    fn strftime_formats() {
        let date = (2024, 7, 26);
        assert_eq!(strftime("%d %b %Y", date), "26 Jul 2024");
        assert_eq!(strftime("%Y-%m-%d", date), "2024-07-26");
        assert_eq!(strftime("%A, %B %-d", (2024, 1, 5)), "Friday, January 5");
        assert_eq!(strftime("100%% %q", date), "100% %q");
    }
}
