"""Extraction from many vendor pages: a pool of fetch-then-extract pipelines under per-domain limits.

    python examples/vendor_pages.py [--pages 12]

Three vendors' sites are served on this machine, one per loopback address (127.0.0.1,
127.0.0.2, 127.0.0.3 are three hosts, so three downstreams to the limiter). Every page goes
through two stages: ``fetch_page`` (``ctx.http`` through the fleet transport: the SSRF
guard, and each vendor's own rate and concurrency limit, cluster-wide) and ``extract_offer``
(the product and price from the HTML, and the tone of the announcement from the model). The
run is a pool: at most ``--in-flight`` stages execute at once, whatever the workers' size.

Vendor C's site is broken for some pages (503 every time): those are retried with backoff,
then dead-lettered with the whole context, while the others finish. The report shows what
each site saw: requests, and the most it ever had in flight against its limit.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from agentfleet import TaskContext, fleet_task, run_agent
from agentfleet.config import get_settings
from agentfleet.errors import BadRequest, error_for_status
from agentfleet.tools.fetch import http_fetch

__all__ = ["extract_offer", "fetch_page"]

VENDORS = {"vendor-a": "127.0.0.1", "vendor-b": "127.0.0.2", "vendor-c": "127.0.0.3"}
LIMITS = {
    "127.0.0.1": {"rate_per_s": 20, "max_concurrency": 4},
    "127.0.0.2": {"rate_per_s": 5, "max_concurrency": 2},
    "127.0.0.3": {"rate_per_s": 10, "max_concurrency": 1},
}
TONES = ("POSITIVE", "NEGATIVE", "NEUTRAL")
_OFFER = re.compile(r'<h1 class="product">(?P<product>[^<]+)</h1>.*?data-price="(?P<price>[0-9.]+)"', re.S)
_NEWS = re.compile(r'<p class="news">(?P<news>[^<]*)</p>')


@fleet_task(name="examples.fetch_page", max_retries=2)
def fetch_page(ctx: TaskContext, url: str) -> dict[str, Any]:
    """Stage 1: the page's HTML; an HTTP error status is raised (5xx retried, 4xx not)."""
    page = http_fetch(ctx.http, url, settings=get_settings().fetch)
    err = error_for_status(
        page.status, message=f"HTTP {page.status} from {url}", downstream=urlsplit(url).hostname
    )
    if err is not None:
        raise err
    return {"url": url, "html": page.text}


@fleet_task(name="examples.extract_offer", max_retries=2)
def extract_offer(ctx: TaskContext, url: str, html: str) -> dict[str, Any]:
    """Stage 2: product and price from the HTML, and the model's reading of the announcement."""
    found = _OFFER.search(html)
    if found is None:
        raise BadRequest(f"{url}: no product and price on the page")
    news = _NEWS.search(html)
    text = news.group("news") if news else ""
    prompt = f"Classify the sentiment of the text. Answer with one word: {', '.join(TONES)}.\n\nText: {text}"
    tone = run_agent(ctx, prompt=prompt, max_tokens=8, max_turns=1).text.strip().upper()
    return {"url": url, "product": found.group("product"), "price": float(found.group("price")), "tone": tone}


class _Site:
    """One vendor's site: pages of products; counts requests and the most in flight at once."""

    def __init__(self, name: str, host: str, *, broken_every: int = 0, latency_s: float = 0.05) -> None:
        self.name, self.host = name, host
        self.broken_every, self.latency_s = broken_every, latency_s
        self.requests = self.in_flight = self.max_in_flight = 0
        self._lock = threading.Lock()
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                site.serve(self)

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, page: int) -> str:
        return f"http://{self.host}:{self.server.server_address[1]}/products/{page}"

    def serve(self, handler: BaseHTTPRequestHandler) -> None:
        with self._lock:
            self.requests += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            time.sleep(self.latency_s)
            page = int(handler.path.rsplit("/", 1)[-1])
            if self.broken_every and page % self.broken_every == 0:
                body, status = b"upstream unavailable", 503
            else:
                mood = [
                    "Great news: we love our customers!",
                    "Terrible news: prices rise.",
                    "Prices as usual.",
                ]
                body = (
                    f'<html><h1 class="product">{self.name} plan {page}</h1>'
                    f'<span data-price="{9 + page * 2.5:.2f}">price</span>'
                    f'<p class="news">{mood[page % 3]}</p></html>'
                ).encode()
                status = 200
            handler.send_response(status)
            handler.send_header("content-type", "text/html; charset=utf-8")
            handler.send_header("content-length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
        finally:
            with self._lock:
                self.in_flight -= 1


@contextlib.contextmanager
def vendor_sites() -> Iterator[list[_Site]]:
    """The three vendors' sites, served until the block ends; vendor C fails every third page."""
    sites = [_Site(name, host, broken_every=3 if name == "vendor-c" else 0) for name, host in VENDORS.items()]
    for site in sites:
        site.thread.start()
    try:
        yield sites
    finally:
        for site in sites:
            site.server.shutdown()
            site.server.server_close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=12, help="Pages per vendor (default 12)")
    parser.add_argument("--in-flight", type=int, default=6, help="Stages executing at once (default 6)")
    parser.add_argument("--json", action="store_true", help="Print one JSON document")
    args = parser.parse_args(argv)

    from offline import offline_fleet

    env = {
        "AGENTFLEET_LIMITS": json.dumps(LIMITS),
        "AGENTFLEET_FETCH__ALLOW_PRIVATE_HOSTS": json.dumps(["127.0.0.0/8"]),
        "AGENTFLEET_RETRY__BACKOFF_BASE_S": "0.2",
        "AGENTFLEET_RETRY__BACKOFF_CAP_S": "1",
        # Vendor C's failures open its circuit; a short cooldown keeps the demo brisk.
        "AGENTFLEET_DLQ__CIRCUIT_COOLDOWN_S": "2",
    }
    with vendor_sites() as sites, offline_fleet("vendor_pages", concurrency=16, env=env) as cluster:
        inputs = [{"url": site.url(page)} for site in sites for page in range(1, args.pages + 1)]
        fleet = cluster.fleet()
        run = fleet.pipeline(
            ["examples.fetch_page", "examples.extract_offer"],
            inputs,
            name="vendor pages",
            max_in_flight=args.in_flight,
        )
        summary = run.wait(timeout_s=300)
        offers = [o.result for o in run.outcomes() if o.ok]
        dead = [{"url": inputs[o.index]["url"], "error": o.error} for o in run.outcomes() if not o.ok]
        seen = {s.host: {"requests": s.requests, "max_in_flight": s.max_in_flight} for s in sites}
        report = {"summary": summary.model_dump(mode="json"), "offers": offers, "failed": dead, "sites": seen}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for offer in sorted(offers, key=lambda o: o["url"]):
        print(f"{offer['product']:<22} {offer['price']:>8.2f}  {offer['tone'].lower():<9} {offer['url']}")
    for failure in dead:
        print(f"FAILED {failure['url']}: {failure['error']}")
    for host, figures in seen.items():
        cap = LIMITS[host]["max_concurrency"]
        most = figures["max_in_flight"]
        print(f"{host}: {figures['requests']} requests, at most {most} at once (limit {cap})")
    print(
        f"{summary.succeeded} pages extracted, {summary.dead_lettered} dead-lettered "
        f"(`agentfleet dlq list --run {summary.run_id}`) in {summary.wall_clock_s:.1f} s, "
        f"{summary.deferrals} waits for a limit or a circuit, cost ${summary.cost_usd:.4f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
