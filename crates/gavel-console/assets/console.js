// The console's only script, served from the binary (the Content-Security-
// Policy allows no inline script). It keeps a page current without a reload:
// a server-sent `change` event makes it re-read the page's live region
// (`?live=1`, the same read as the page, made as the signed-in person), and
// expiry times count down. It never builds HTML from event data: the live
// region's HTML comes from the console's escaping templates.
//
// One live connection per browser, not per tab (docs/decisions/0091): a
// browser opens at most six HTTP/1.1 connections to a host, and a stream
// per tab pinned them all, so a seventh tab never loaded. The first live
// page takes a Web Lock and holds the only `/events` stream; it relays each
// change, without its data, to the other tabs over a BroadcastChannel. When
// that tab goes, its lock is released and a waiting tab takes it and opens
// the stream, which resumes from the session's last cursor. Tabs without the
// lock never open `/events`. A browser without Web Locks or BroadcastChannel
// gets no live updates, as with JavaScript off: a reload shows the news.
"use strict";

/** The lock whose holder owns the browser's one stream. */
const STREAM_LOCK = "gavel-console-events";
/** The channel the stream's holder relays changes on. */
const CHANGES_CHANNEL = "gavel-console-changes";
/** After the console refuses the stream (signed out, too many streams), the
 * holder lets go of the lock this long later, for itself or another tab to
 * try again: a slow retry, not a loop. */
const STREAM_RETRY_MS = 30_000;

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

// A hidden tab re-reads when it is shown again, not on every change: ten
// background tabs would otherwise re-read their pages at each event.
let stale = false;

function changed() {
  if (document.hidden) {
    stale = true;
  } else {
    void refreshLive();
  }
}

function agoText(ms) {
  const minutes = Math.floor(ms / 60_000);
  if (minutes < 1) {
    return "less than a minute ago";
  }
  if (minutes < 60) {
    return `${minutes} min ago`;
  }
  const hours = Math.floor(minutes / 60);
  return hours < 48 ? `${hours} h ${minutes % 60} min ago` : `${Math.floor(hours / 24)} days ago`;
}

function countDown() {
  const now = Date.now();
  for (const element of document.querySelectorAll("[data-since-ms]")) {
    // Set only when it changes (once a minute): the live region announces changes.
    const ago = ` (${agoText(now - Number(element.getAttribute("data-since-ms")))})`;
    if (element.textContent !== ago) {
      element.textContent = ago;
    }
  }
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
  if (main !== null && main.getAttribute("data-live") === "1") {
    followChanges();
  }
});

function followChanges() {
  const supported =
    typeof EventSource !== "undefined" && typeof BroadcastChannel !== "undefined" && "locks" in navigator;
  if (!supported) {
    return;
  }
  const channel = new BroadcastChannel(CHANGES_CHANNEL);
  channel.addEventListener("message", (event) => {
    if (event.data === "change") {
      changed();
    }
  });
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && stale) {
      stale = false;
      void refreshLive();
    }
  });
  let source = null;
  let release = null;
  let waiting = null;
  let retry = null;
  const letGo = () => {
    if (retry !== null) {
      window.clearTimeout(retry);
      retry = null;
    }
    if (source !== null) {
      source.close();
      source = null;
    }
    if (release !== null) {
      release();
      release = null;
    }
  };
  const holdStream = () => {
    waiting = new AbortController();
    navigator.locks
      .request(STREAM_LOCK, { signal: waiting.signal }, () => {
        waiting = null;
        return new Promise((resolve) => {
          release = resolve;
          source = new EventSource("/events");
          source.addEventListener("change", () => {
            channel.postMessage("change");
            changed();
          });
          source.addEventListener("error", () => {
            // A dropped stream reconnects by itself (readyState CONNECTING);
            // a refused one is closed for good.
            if (source !== null && source.readyState === EventSource.CLOSED) {
              source = null;
              retry = window.setTimeout(() => {
                letGo();
                holdStream();
              }, STREAM_RETRY_MS);
            }
          });
        });
      })
      .catch(() => {
        // The request was aborted: the page was hidden into the back-forward cache.
      });
  };
  // Leaving the page (or freezing it in the back-forward cache) frees the
  // lock and the stream at once, for another tab to take over.
  window.addEventListener("pagehide", () => {
    if (waiting !== null) {
      waiting.abort();
      waiting = null;
    }
    letGo();
  });
  window.addEventListener("pageshow", (event) => {
    if (event.persisted) {
      // Changes went by while the page was frozen: read them, then follow.
      void refreshLive();
      holdStream();
    }
  });
  holdStream();
}
