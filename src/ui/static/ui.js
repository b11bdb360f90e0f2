// The dashboard's script: progressive enhancement only (every page works
// without it). It refreshes the live parts of a page from this server.
(function () {
  'use strict';

  function csrf() {
    const meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.content : '';
  }

  async function fetchHtml(url) {
    const response = await fetch(url, { credentials: 'same-origin', cache: 'no-store', headers: { Accept: 'text/html' } });
    if (!response.ok) throw new Error('HTTP ' + response.status);
    return response.text();
  }

  // A section with id "live" and data-refresh (ms) is reloaded from the
  // page's own address, unless the "live" box is unticked or the reader is
  // typing in it.
  function refreshLiveSection() {
    const section = document.getElementById('live');
    if (!section) return;
    const every = Number(section.dataset.refresh) || 2000;
    const toggle = document.getElementById('live-refresh');
    const tick = async () => {
      const wanted = (!toggle || toggle.checked) && document.visibilityState === 'visible';
      if (wanted && !section.contains(document.activeElement)) {
        try {
          const doc = new DOMParser().parseFromString(await fetchHtml(location.href), 'text/html');
          const fresh = doc.getElementById('live');
          if (fresh && fresh.innerHTML !== section.innerHTML) section.innerHTML = fresh.innerHTML;
        } catch (e) { /* the next tick tries again */ }
      }
      setTimeout(tick, every);
    };
    setTimeout(tick, every);
  }

  // The job's progress (state, timeline, attempts, events), reloaded while
  // any attempt is still pending, running or unknown. Where the box lists
  // the kinds of events to listen for (data-event-kinds), it is reloaded on
  // each of the job's events, from the job's event stream
  // (/ui/api/jobs/{id}/events, after the last event the box shows); without
  // it, when the stream fails before the job is finished, and for an attempt
  // still open once it is, every 400 ms. The box says how it follows
  // (data-following: "stream" or "poll") and how many events the stream
  // brought (data-streamed).
  function followTimeline(box, onUpdate) {
    const id = box.dataset.job;
    const path = encodeURIComponent(id);
    let stopped = false;
    let source = null;
    const current = () => !stopped && box.dataset.job === id;
    const isOpen = (progress) => !progress || progress.dataset.open === 'true';
    const following = (how) => { box.dataset.following = how; };
    const settle = () => { box.dataset.settled = 'true'; };

    // Reloads the progress; the element that shows it.
    const reload = async () => {
      let html = null;
      try {
        html = await fetchHtml('/ui/jobs/' + path + '/timeline');
      } catch (e) { /* shown as it was: the caller goes on following */ }
      if (!current()) return null;
      if (html !== null) box.innerHTML = html;
      const progress = box.querySelector('.progress');
      if (onUpdate) onUpdate(progress);
      return progress;
    };

    // Reloads every 400 ms, the first time after `delay` ms.
    const poll = (delay) => {
      following('poll');
      const step = async () => {
        if (!current()) return;
        const progress = await reload();
        if (!current()) return;
        if (isOpen(progress)) setTimeout(step, 400);
        else settle();
      };
      setTimeout(step, delay);
    };

    // Reloads on each event of the stream from after event `after`; one
    // reload at a time, and one more when events came during it.
    const stream = (after) => {
      following('stream');
      box.dataset.streamed = '0';
      source = new EventSource('/ui/api/jobs/' + path + '/events?after=' + encodeURIComponent(after));
      let reloading = false;
      let again = false;
      let finished = false;
      const streaming = () => current() && box.dataset.following === 'stream';
      const onEvent = async (event) => {
        if (!streaming()) return;
        box.dataset.streamed = String(Number(box.dataset.streamed) + 1);
        const state = JSON.parse(event.data).job_state;
        // At the event that finishes the job the page stops streaming and
        // polls for what follows (the losers' cancellations).
        if (state === 'succeeded' || state === 'canceled') {
          finished = true;
          source.close();
        }
        again = true;
        if (reloading) return;
        reloading = true;
        let progress = null;
        while (again && streaming()) {
          again = false;
          progress = await reload();
        }
        reloading = false;
        if (!streaming()) return;
        if (!isOpen(progress)) {
          source.close();
          settle();
        } else if (finished) {
          poll(400);
        }
      };
      for (const kind of box.dataset.eventKinds.split(' ')) source.addEventListener(kind, onEvent);
      source.onerror = () => {
        if (!streaming()) return;
        source.close();
        poll(0);
      };
    };

    const start = async () => {
      const progress = box.querySelector('.progress') || await reload();
      if (!current()) return;
      if (progress && !isOpen(progress)) settle();
      else if (progress && box.dataset.eventKinds && window.EventSource) stream(progress.dataset.lastEvent || '0');
      else poll(400);
    };
    start();
    return {
      stop() {
        stopped = true;
        if (source) source.close();
      },
    };
  }

  window.OneJob = { csrf, followTimeline };

  document.addEventListener('DOMContentLoaded', () => {
    refreshLiveSection();
    const box = document.getElementById('timeline-box');
    if (box && box.dataset.job && !document.getElementById('demo')) {
      const progress = box.querySelector('.progress');
      if (progress && progress.dataset.open === 'true') followTimeline(box);
      else box.dataset.settled = 'true';
    }
  });
})();
