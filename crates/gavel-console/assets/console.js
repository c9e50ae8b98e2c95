// The console's only script, served from the binary (the Content-Security-
// Policy allows no inline script). It keeps a page current without a reload:
// a server-sent `change` event makes it re-read the page's live region
// (`?live=1`, the same read as the page, made as the signed-in person), and
// expiry times count down. It never builds HTML from event data: the live
// region's HTML comes from the console's escaping templates.
"use strict";

function liveUrl() {
  const url = new URL(window.location.href);
  url.searchParams.set("live", "1");
  return url.toString();
}

let refreshing = false;
let again = false;
// The live region as last rendered from the server, in the browser's own
// serialization (taken before the countdown edits it). A change event that
// leaves the region as it was (the stream replays recent events, and most
// events concern other records) must not replace it: replacing an unchanged
// form would pull its buttons out from under a person about to click one.
let shownLive = null;

function serialized(html) {
  const parsed = document.createElement("template");
  parsed.innerHTML = html;
  return parsed.innerHTML;
}

async function refreshLive() {
  if (refreshing) {
    again = true;
    return;
  }
  refreshing = true;
  try {
    const response = await fetch(liveUrl(), { credentials: "same-origin", headers: { Accept: "text/html" } });
    const live = document.getElementById("live");
    if (response.ok && live !== null) {
      const active = document.activeElement;
      const typing = active !== null && live.contains(active) && (active.tagName === "TEXTAREA" || active.tagName === "INPUT");
      const html = await response.text();
      const fresh = serialized(html);
      if (!typing && fresh !== shownLive) {
        live.innerHTML = html;
        shownLive = fresh;
        countDown();
      }
    }
  } finally {
    refreshing = false;
    if (again) {
      again = false;
      void refreshLive();
    }
  }
}

function countDown() {
  const now = Date.now();
  for (const element of document.querySelectorAll("[data-expires-ms]")) {
    const left = Math.round((Number(element.getAttribute("data-expires-ms")) - now) / 1000);
    if (left <= 0) {
      element.textContent = "expired";
    } else {
      const minutes = Math.floor(left / 60);
      element.textContent = minutes > 0 ? `${minutes} min ${left % 60} s left` : `${left} s left`;
    }
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const live = document.getElementById("live");
  if (live !== null) {
    shownLive = live.innerHTML;
  }
  countDown();
  window.setInterval(countDown, 1000);
  const main = document.getElementById("main");
  if (main !== null && main.getAttribute("data-live") === "1" && typeof EventSource !== "undefined") {
    const source = new EventSource("/events");
    source.addEventListener("change", () => void refreshLive());
  }
});
