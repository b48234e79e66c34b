//! Chat templates: the oracle's chat prompts rendered from hf/chat_template.jinja must be exactly
//! the oracle's prompt_text and encode to its prompt_ids; plus the Jinja features HF templates
//! lean on (raise_exception, loop controls, tojson, Python string methods, strftime_now).

use inferno_core::chat::{ChatMessage, ChatTemplate};
use inferno_core::tokenizer::Tokenizer;
use inferno_core::Error;
use serde_json::Value;

mod common;

use common::read_oracle as read;

fn user(content: &str) -> ChatMessage {
    ChatMessage::new("user", content)
}

fn render(source: &str, messages: &[ChatMessage]) -> Result<String, Error> {
    ChatTemplate::new(source, "<s>", "</s>")?.render(messages, true)
}

#[test]
fn oracle_chat_prompts_from_jinja_file() {
    let template = ChatTemplate::new(
        &read("hf/chat_template.jinja"),
        "<|im_start|>",
        "<|im_end|>",
    )
    .expect("oracle template compiles");
    let tok = Tokenizer::from_json(&read("hf/tokenizer.json")).expect("tokenizer");
    for name in ["chat_1_default_system", "chat_2_with_system"] {
        let file: Value =
            serde_json::from_str(&read(&format!("logits/{name}.json"))).expect("json");
        let messages: Vec<ChatMessage> =
            serde_json::from_value(file["messages"].clone()).expect("messages");
        assert_eq!(file["chat_template_add_generation_prompt"], true);
        let text = template.render(&messages, true).expect("render");
        assert_eq!(
            text,
            file["prompt_text"].as_str().expect("prompt_text"),
            "render({name})"
        );
        let expected: Vec<u32> = file["prompt_ids"]
            .as_array()
            .expect("ids")
            .iter()
            .map(|x| x.as_u64().expect("id") as u32)
            .collect();
        assert_eq!(
            tok.encode(&text).expect("encode"),
            expected,
            "encode({name})"
        );
    }
}

#[test]
fn generation_prompt_is_optional_and_chatml_matches_smollm() {
    let oracle = ChatTemplate::new(&read("hf/chat_template.jinja"), "", "").expect("compiles");
    let messages = [ChatMessage::new("system", "Be brief."), user("hi")];
    let without = oracle.render(&messages, false).expect("render");
    assert_eq!(
        without,
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
    );
    let with = oracle.render(&messages, true).expect("render");
    assert_eq!(with, format!("{without}<|im_start|>assistant\n"));
    // With a system message first, SmolLM's template is plain ChatML.
    assert_eq!(
        ChatTemplate::chatml()
            .render(&messages, true)
            .expect("render"),
        with
    );
    assert_eq!(
        ChatTemplate::chatml().render(&[], false).expect("render"),
        ""
    );
}

#[test]
fn syntax_errors_name_the_line() {
    let err = render("line one\n{% for m in messages %}\n{{ m.content }\n", &[]).unwrap_err();
    match err {
        Error::Template(message) => assert!(message.contains("line 3"), "{message}"),
        other => panic!("expected a template error, got {other:?}"),
    }
}

#[test]
fn raise_exception_is_a_template_error() {
    // Mistral-style role check.
    let source = "{% for m in messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}\
        {{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}\
        {% endif %}[{{ m.role }}]{{ m.content }}{% endfor %}";
    assert_eq!(render(source, &[user("a")]).expect("render"), "[user]a");
    match render(source, &[user("a"), user("b")]) {
        Err(Error::Template(message)) => {
            assert!(
                message.contains("Conversation roles must alternate"),
                "{message}"
            )
        }
        other => panic!("expected a template error, got {other:?}"),
    }
}

#[test]
fn hf_jinja_features() {
    let messages = [
        ChatMessage::new("system", "  sys  "),
        user("Hello <b>World</b>"),
    ];
    // trim_blocks + lstrip_blocks as transformers renders: block tags leave no blank lines.
    let source = "{% for m in messages %}\n    {% if m.role == 'system' %}\n{{ m.content.strip() }}|\n    {% endif %}\n{% endfor %}";
    assert_eq!(render(source, &messages).expect("render"), "sys|\n");
    // Loop controls.
    let source = "{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}{{ m.content }}{% break %}{% endfor %}";
    assert_eq!(
        render(source, &messages).expect("render"),
        "Hello <b>World</b>"
    );
    // Python string methods (minijinja-contrib pycompat); booleans print as Python's do.
    let source = "{{ messages[1].content.upper() }},{{ messages[1].content.startswith('Hello') }},{{ messages[1].content.split(' ')[0] }},{{ '  x '.lstrip() }}";
    assert_eq!(
        render(source, &messages).expect("render"),
        "HELLO <B>WORLD</B>,True,Hello,x "
    );
    // tojson like Python's json.dumps(ensure_ascii=False): no HTML escaping, ", " separators.
    let source = "{{ {'text': messages[1].content, 'n': [1, 2.5]} | tojson }}";
    assert_eq!(
        render(source, &messages).expect("render"),
        r#"{"n": [1, 2.5], "text": "Hello <b>World</b>"}"#
    );
    let source = "{{ [1, 'é\n', none, true] | tojson(indent=2) }}";
    assert_eq!(
        render(source, &[]).expect("render"),
        "[\n  1,\n  \"é\\n\",\n  null,\n  true\n]"
    );
    // bos/eos, tools defaults to none, namespace.
    let source = "{{ bos_token }}{% if tools is none %}no tools{% endif %}{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}{{ eos_token }}";
    assert_eq!(
        render(source, &messages).expect("render"),
        "<s>no tools2</s>"
    );
}

#[test]
fn strftime_now_uses_the_pinned_date() {
    let template = ChatTemplate::new("Today: {{ strftime_now('%d %b %Y') }}", "", "")
        .expect("compiles")
        .with_date(2024, 7, 26);
    assert_eq!(
        template.render(&[], true).expect("render"),
        "Today: 26 Jul 2024"
    );
    // Unpinned it is today's date: at least well-formed.
    let today = ChatTemplate::new("{{ strftime_now('%Y-%m-%d') }}", "", "").expect("compiles");
    let text = today.render(&[], true).expect("render");
    assert_eq!(text.len(), 10, "{text}");
}

#[test]
fn chat_message_serde() {
    let messages: Vec<ChatMessage> =
        serde_json::from_str(r#"[{"role": "user", "content": "hi"}]"#).expect("parse");
    assert_eq!(messages, vec![user("hi")]);
    assert_eq!(
        serde_json::to_string(&messages[0]).expect("serialize"),
        r#"{"role":"user","content":"hi"}"#
    );
}
