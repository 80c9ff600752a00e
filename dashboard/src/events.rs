//! `/v2/events` (admin scope; the key offered as a subprotocol next to `infergate.v1`): the
//! server's live feed, one tick a second plus state changes. A page opens it for the frames it
//! wants and closes it when the page goes away (`alive` turns false).

use crate::session;
use crate::types::Event;
use leptos::prelude::*;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

/// Opens the feed and hands every frame to `on_frame` while `alive` holds. A frame this build
/// does not know (a newer server's event type) is skipped.
pub fn open(
    alive: StoredValue<bool>,
    mut on_frame: impl FnMut(Event) + 'static,
) -> Option<web_sys::WebSocket> {
    let origin = web_sys::window()
        .and_then(|w| w.location().origin().ok())
        .unwrap_or_default();
    let url = format!("{}/v2/events", origin.replacen("http", "ws", 1));
    let key = session::stored_key().unwrap_or_default();
    let protocols = js_sys::Array::of2(&"infergate.v1".into(), &key.into());
    let ws = web_sys::WebSocket::new_with_str_sequence(&url, &protocols).ok()?;
    let ws_msg = ws.clone();
    let on_message =
        Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |e: web_sys::MessageEvent| {
            if !alive.try_get_value().unwrap_or(false) {
                let _ = ws_msg.close();
                return;
            }
            let Some(text) = e.data().as_string() else {
                return;
            };
            if let Ok(v) = serde_json::from_str::<Event>(&text) {
                on_frame(v);
            }
        });
    ws.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    on_message.forget();
    Some(ws)
}
