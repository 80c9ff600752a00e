//! Test component that implements some other world: uploads must reject it.

wit_bindgen::generate!({
    inline: "package test:other@0.1.0;
             world other { export describe: func() -> string; }",
});

struct Other;

impl Guest for Other {
    fn describe() -> String {
        "not an infergate plugin".into()
    }
}

export!(Other);
