// The admin console: it signs in through POST /login, keeps both tokens in this page's
// memory only (no cookie, no storage: a reload signs out, and no other site can make the
// browser send them), renews the access token through POST /token before it expires, and
// lists and ends a user's sessions through the admin API. Every value from the service is
// shown with textContent, so a User-Agent holding markup stays text.
"use strict";

(() => {
  // The service's paths, relative to this page (/admin/), so that a path prefix set by a
  // proxy in front of the service is kept.
  const API = "../";
  const PAGE_SIZE = 50;
  // Renew when this share of the access token's lifetime has passed.
  const RENEW_AT = 0.75;
  // Seconds before another try when the service was busy or down (no Retry-After), and
  // the longest wait a Retry-After may ask.
  const RETRY_SECONDS = 5;
  const MAX_RETRY_SECONDS = 300;

  const state = {
    username: "",
    accessToken: "",
    refreshToken: "",
    renewTimer: 0,
    renewing: null,
    shownUser: "",
    next: null,
  };

  const element = (id) => document.getElementById(id);

  function say(message, isError = false) {
    const status = element("status");
    status.textContent = message;
    status.className = isError ? "error" : "";
  }

  // The access token's claims, read only to time its renewal: the service checks it.
  function lifetimeOf(token) {
    try {
      const part = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
      const claims = JSON.parse(atob(part + "=".repeat((4 - (part.length % 4)) % 4)));
      const seconds = claims.exp - claims.iat;
      return Number.isFinite(seconds) && seconds > 0 ? seconds : 60;
    } catch {
      return 60;
    }
  }

  function keep(tokens) {
    state.accessToken = tokens.accessToken;
    if (tokens.refreshToken) {
      state.refreshToken = tokens.refreshToken; // rotation hands out a new one
    }
    clearTimeout(state.renewTimer);
    const delay = lifetimeOf(tokens.accessToken) * RENEW_AT * 1000;
    state.renewTimer = setTimeout(() => renew().catch(() => {}), delay);
  }

  // The wait a 429 or 503 asks for (Retry-After, in seconds), bounded.
  function retryDelay(answer) {
    const seconds = Number(answer.headers.get("Retry-After"));
    const wait = Number.isFinite(seconds) && seconds > 0 ? seconds : RETRY_SECONDS;
    return Math.min(wait, MAX_RETRY_SECONDS) * 1000;
  }

  function forget() {
    clearTimeout(state.renewTimer);
    Object.assign(state, { username: "", accessToken: "", refreshToken: "", renewing: null });
    state.shownUser = "";
    state.next = null;
    element("signed-in").hidden = true;
    element("signed-in-name").textContent = "";
    element("console").hidden = true;
    element("user-sessions").hidden = true;
    element("sessions").replaceChildren();
    element("sign-in").hidden = false;
  }

  async function postJson(path, body) {
    return fetch(API + path, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
  }

  // Renew the access token with the refresh token; at most one renewal at a time.
  function renew() {
    if (state.renewing === null) {
      const refreshToken = state.refreshToken;
      state.renewing = (async () => {
        const answer = await postJson("token", { username: state.username, refreshToken });
        if (state.refreshToken !== refreshToken) {
          return false; // signed out, or in again, meanwhile
        }
        if (answer.status === 401) {
          forget();
          say("Your sign-in has ended: sign in again.", true);
          return false;
        }
        if (answer.status !== 200) {
          // busy or down (429, 503): the sign-in stays, and the renewal is tried again
          clearTimeout(state.renewTimer);
          state.renewTimer = setTimeout(() => renew().catch(() => {}), retryDelay(answer));
          say(`Could not renew the sign-in (HTTP ${answer.status}): trying again shortly.`, true);
          return false;
        }
        keep(await answer.json());
        return true;
      })().finally(() => {
        state.renewing = null;
      });
    }
    return state.renewing;
  }

  // Call the API with the access token; a 401 renews it once and tries again.
  async function call(method, path) {
    const send = () =>
      fetch(API + path, { method, headers: { Authorization: "Bearer " + state.accessToken } });
    let answer = await send();
    if (answer.status === 401 && state.refreshToken && (await renew())) {
      answer = await send();
    }
    return answer;
  }

  function sessionsPath(username) {
    return "admin/users/" + encodeURIComponent(username) + "/sessions";
  }

  function when(seconds) {
    return new Date(seconds * 1000).toISOString().slice(0, 19).replace("T", " ") + " UTC";
  }

  function cell(text, className) {
    const td = document.createElement("td");
    td.textContent = text;
    if (className) {
      td.className = className;
    }
    return td;
  }

  function row(session) {
    const tr = document.createElement("tr");
    tr.dataset.session = session.id;
    const end = document.createElement("button");
    end.type = "button";
    end.textContent = "End";
    end.addEventListener("click", () => endOne(session.id, tr));
    const action = document.createElement("td");
    action.append(end);
    tr.append(
      cell(session.id, "id"),
      cell(when(session.loggedInAt), "time"),
      cell(when(session.lastUsedAt), "time"),
      cell(session.address || "unknown"),
      cell(session.userAgent, "agent"),
      action,
    );
    return tr;
  }

  function failed(answer, what) {
    if (answer.status === 403) {
      say("Admins only: this account may not manage sessions.", true);
    } else if (answer.status !== 401) {
      say(`Could not ${what} (HTTP ${answer.status}).`, true);
    }
  }

  async function list(username, after) {
    let path = sessionsPath(username) + "?limit=" + PAGE_SIZE;
    if (after) {
      path += "&after=" + encodeURIComponent(after);
    }
    const answer = await call("GET", path);
    if (answer.status !== 200) {
      failed(answer, "list the sessions");
      return answer.status;
    }
    const page = await answer.json();
    const body = element("sessions");
    if (!after) {
      body.replaceChildren();
      state.shownUser = username;
      element("shown-user").textContent = username;
    }
    body.append(...page.sessions.map(row));
    state.next = page.next;
    element("more").hidden = page.next === null;
    element("none").hidden = body.children.length > 0;
    element("user-sessions").hidden = false;
    say(`${body.children.length} session(s) shown.`);
    return 200;
  }

  async function endOne(id, tr) {
    const answer = await call("DELETE", sessionsPath(state.shownUser) + "/" + encodeURIComponent(id));
    if (answer.status === 204 || answer.status === 404) {
      tr.remove();
      element("none").hidden = element("sessions").children.length > 0;
      say(answer.status === 204 ? "Session ended." : "That session had already ended.");
    } else {
      failed(answer, "end the session");
    }
  }

  async function endAll() {
    const username = state.shownUser;
    if (!confirm(`End every session of ${username}? Their access tokens stop working too.`)) {
      return;
    }
    const answer = await call("DELETE", sessionsPath(username));
    if (answer.status !== 200) {
      failed(answer, "end the sessions");
      return;
    }
    const { ended } = await answer.json();
    await list(username, null);
    say(`${ended} session(s) ended.`);
  }

  async function signIn(event) {
    event.preventDefault();
    const form = event.target;
    const username = form.elements.username.value;
    const password = form.elements.password.value;
    say("Signing in…");
    const answer = await postJson("login", password ? { username, password } : { username });
    form.elements.password.value = "";
    if (answer.status !== 200) {
      say(answer.status === 401 ? "Wrong username or password." : `Sign-in failed (HTTP ${answer.status}).`, true);
      return;
    }
    forget();
    state.username = username;
    keep(await answer.json());
    // The admin API decides who may use the console: the page starts on one's own sessions.
    const status = await list(username, null);
    if (status === 403) {
      const revoked = await revoke(state.refreshToken);
      forget();
      say(
        "Admins only: this account may not manage sessions." +
          (revoked === 204 ? "" : ` Its sign-in could not be revoked (HTTP ${revoked}).`),
        true,
      );
      return;
    }
    if (!state.accessToken) {
      return; // refused and not renewed: forget() has said so
    }
    form.hidden = true;
    element("signed-in-name").textContent = username;
    element("signed-in").hidden = false;
    element("console").hidden = false;
    element("find").elements.username.value = username;
  }

  // Revoke a refresh token; return the answer's status (204 when done).
  async function revoke(refreshToken) {
    const answer = await fetch(API + "token/" + encodeURIComponent(refreshToken), {
      method: "DELETE",
    });
    return answer.status;
  }

  // Signed out only once the refresh token is revoked: a busy or down service (429, 503)
  // leaves the page signed in, to try again, rather than the token alive and forgotten.
  async function signOut() {
    if (state.refreshToken) {
      const status = await revoke(state.refreshToken);
      if (status !== 204) {
        say(`Could not sign out (HTTP ${status}): try again shortly.`, true);
        return;
      }
    }
    forget();
    say("Signed out.");
  }

  function report(error) {
    say(`Something went wrong: ${error}`, true);
  }

  element("sign-in").addEventListener("submit", (event) => signIn(event).catch(report));
  element("find").addEventListener("submit", (event) => {
    event.preventDefault();
    list(event.target.elements.username.value, null).catch(report);
  });
  element("more").addEventListener("click", () => list(state.shownUser, state.next).catch(report));
  element("end-all").addEventListener("click", () => endAll().catch(report));
  element("sign-out").addEventListener("click", () => signOut().catch(report));
})();
