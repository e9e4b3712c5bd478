//! Test plugin: a well-formed component of a foreign world (`acme:greeter`).

wit_bindgen::generate!({ path: "wit", world: "greeter" });

struct Greeter;

impl exports::acme::greeter::greet::Guest for Greeter {
    fn greet(name: String) -> String {
        format!("hello, {name}")
    }
}

export!(Greeter);
