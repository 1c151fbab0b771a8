// trigd pages: the copy buttons. Everything else works without JavaScript.
// A button `data-copy="ID"` copies the text of element ID and reports in
// element `ID-status`. Buttons start hidden and are shown only here, so that
// a browser without JavaScript shows no dead buttons.
"use strict";

function selectAndCopy(el) {
  var range = document.createRange();
  range.selectNodeContents(el);
  var sel = window.getSelection();
  sel.removeAllRanges();
  sel.addRange(range);
  try {
    return document.execCommand("copy");
  } catch (e) {
    return false;
  }
}

function copyFrom(button) {
  var id = button.getAttribute("data-copy");
  var el = document.getElementById(id);
  var status = document.getElementById(id + "-status");
  if (!el) {
    return;
  }
  var text = el.textContent;
  function report(ok) {
    if (status) {
      status.textContent = ok ? "Copied." : "Could not copy: the text is selected, press Ctrl+C.";
    }
  }
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(text).then(
      function () { report(true); },
      function () { report(selectAndCopy(el)); }
    );
  } else {
    report(selectAndCopy(el));
  }
}

document.addEventListener("DOMContentLoaded", function () {
  var buttons = document.querySelectorAll("button[data-copy]");
  for (var i = 0; i < buttons.length; i++) {
    var b = buttons[i];
    b.hidden = false;
    b.addEventListener("click", function (ev) { copyFrom(ev.currentTarget); });
  }
});

// The run page: while the run is not over, its output element carries
// `data-follow` (the URL of the run's output events). The output is read
// again from the start and appended as text nodes (never as HTML), without
// terminal escape sequences, 7-bit (ESC [) or 8-bit (U+009B), and without
// bidirectional overrides, as the server strips them (strip_ansi in
// src/ui/runs.rs): CSI; OSC (to BEL or ST); DCS, SOS, PM, APC (to ST; a
// string also ends where another sequence starts); other escapes; other
// controls. At the end the page is loaded again to show the final state,
// steps and Result.
var ANSI = new RegExp([
  "(?:\\x1b\\[|\\x9b)[ -?]*[@-~]?",
  "(?:\\x1b\\]|\\x9d)[^\\x07\\x1b\\x90\\x98\\x9b-\\x9f]*(?:\\x07|\\x9c)?",
  "(?:\\x1b[PX^_]|[\\x90\\x98\\x9e\\x9f])[^\\x1b\\x90\\x98\\x9b-\\x9f]*\\x9c?",
  "\\x1b[ -\\/]*[0-~]?",
  "[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f\\u202a-\\u202e\\u2066-\\u2069]"
].join("|"), "g");

function followRun(pre) {
  var url = pre.getAttribute("data-follow");
  if (!url || !window.EventSource) {
    return;
  }
  var source = new EventSource(url);
  var first = true;
  source.addEventListener("output", function (ev) {
    var data = JSON.parse(ev.data);
    if (first) {
      pre.textContent = "";
      first = false;
    }
    var text = document.createTextNode(String(data.Text).replace(ANSI, ""));
    if (data.Stream === "stderr") {
      var span = document.createElement("span");
      span.className = "stderr";
      span.appendChild(text);
      pre.appendChild(span);
    } else {
      pre.appendChild(text);
    }
    pre.setAttribute("data-lines", String(pre.textContent.split("\n").length - 1));
  });
  source.addEventListener("end", function (ev) {
    source.close();
    var data = JSON.parse(ev.data);
    var state = document.getElementById("state");
    if (state && data.State) {
      state.textContent = data.State;
    }
    pre.setAttribute("data-ended", "true");
    window.location.reload();
  });
}

document.addEventListener("DOMContentLoaded", function () {
  var pre = document.querySelector("pre[data-follow]");
  if (pre) {
    followRun(pre);
  }
});
