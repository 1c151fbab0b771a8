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
