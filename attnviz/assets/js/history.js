// One browser history entry per user step (attnviz/ui/history.py says why).
//
// Streamlit writes the address bar from two places: the browser replaces the current entry when
// the user moves a widget bound to the URL, and every change the script makes to st.query_params
// (or to a bound widget's value, or a bound widget that leaves the page) pushes a new entry. One
// click could push two or three entries, some for states never drawn, and a slider move could
// rewrite the entry Back should return to. Here every write of the address bar goes through one
// rule: the first write after a user's click or key press pushes one entry, every other write
// (the rest of that step's reruns, a page load, a Back or Next) replaces the current one. The
// entries written so carry a mark in their state.
export default function oneEntryPerStep(component) {
  install();
  // The URL the run ended on (attnviz/ui/history.py, address_bar): after Streamlit's navigation
  // reset the address bar to the bound widgets' keys on a page's first run, into the same entry.
  const query = component?.data?.query;
  if (typeof query === "string") {
    setTimeout(() => {
      const at = new URL(window.location.href);
      if (at.search.replace(/^\?/, "") === query) return;
      at.search = query;
      window.__attnvizReplace(window.history.state, "", at.href);
    }, 0);
  }
}

function install() {
  if (window.__attnvizHistory) return; // once a page load: the component mounts again per rerun
  window.__attnvizHistory = true;
  const history = window.history;
  const push = history.pushState.bind(history);
  const replace = history.replaceState.bind(history);
  const nav = window.navigation; // the Navigation API, where the browser has it: the direction
  const marked = (state) => ({ ...(state && typeof state === "object" ? state : {}), attnviz: 1 });
  let stepHasEntry = true; // a page load's writes belong to the entry it opened on
  let index = nav?.currentEntry?.index;

  function write(state, title, url) {
    const next = url == null ? window.location.href : new URL(url, window.location.href).href;
    const add = !stepHasEntry && next !== window.location.href;
    stepHasEntry = true;
    (add ? push : replace)(marked(state), title, url);
    index = nav?.currentEntry?.index;
  }
  window.__attnvizReplace = (state, title, url) => replace(marked(state), title, url);
  history.pushState = write;
  history.replaceState = write;
  // This module loads after the first messages of the page's first run: the entries they pushed
  // are unmarked. The one the page shows now is the first that counts.
  replace(marked(history.state), "", window.location.href);

  function userStep(event) {
    if (event.isTrusted) stepHasEntry = false;
  }
  window.addEventListener("pointerdown", userStep, true);
  window.addEventListener("keydown", userStep, true);
  window.addEventListener("popstate", () => {
    const to = nav?.currentEntry?.index;
    const forward = index !== undefined && to !== undefined && to > index;
    index = to;
    if (!history.state?.attnviz) {
      // an entry the page load pushed before this module ran: the same view as its neighbour,
      // so Back goes on past it (out of the app from its first view), Next on to the next view
      if (forward) history.forward();
      else history.back();
      return;
    }
    stepHasEntry = true; // Back or Next: the rerun that restores the entry writes into it
  });
}
