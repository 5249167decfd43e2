// The Azure Bot: Teams' route to the Function App's /api/messages, the Microsoft Teams
// channel, and the OAuth connection the bot's SSO uses (COPILOT_SSO_CONNECTION).
// It is a single-tenant bot of the Entra app registration (MicrosoftAppId): the bot code
// authenticates with that app's client secret, so a managed identity cannot stand in here.
// checkov has no rules for Microsoft.BotService: tests/infra checks it.

param name string
param tags object
param botAppId string
@secure()
param botClientSecret string
param messagingEndpoint string
param botDomain string
param ssoConnectionName string
@allowed([
  'F0'
  'S1'
])
param sku string = 'S1'

resource bot 'Microsoft.BotService/botServices@2022-09-15' = {
  name: name
  location: 'global'
  tags: tags
  kind: 'azurebot'
  sku: {
    name: sku
  }
  properties: {
    displayName: name
    endpoint: messagingEndpoint
    msaAppId: botAppId
    msaAppType: 'SingleTenant'
    msaAppTenantId: tenant().tenantId
    disableLocalAuth: true
    publicNetworkAccess: 'Enabled'
  }
}

resource teams 'Microsoft.BotService/botServices/channels@2022-09-15' = {
  parent: bot
  name: 'MsTeamsChannel'
  location: 'global'
  properties: {
    channelName: 'MsTeamsChannel'
    properties: {
      isEnabled: true
    }
  }
}

// Azure AD v2 OAuth connection: Teams SSO exchanges the rep's token for one of this app
// (the scope the app registration exposes, see docs/DEPLOYING.md step 1).
resource sso 'Microsoft.BotService/botServices/connections@2022-09-15' = {
  parent: bot
  name: ssoConnectionName
  location: 'global'
  properties: {
    serviceProviderId: '30dd229c-58e3-4a48-bdfd-91ec48eb906c'
    serviceProviderDisplayName: 'Azure Active Directory v2'
    clientId: botAppId
    clientSecret: botClientSecret
    scopes: 'api://${botDomain}/${botAppId}/access_as_user'
    parameters: [
      {
        key: 'tenantID'
        value: tenant().tenantId
      }
      {
        key: 'tokenExchangeUrl'
        value: 'api://${botDomain}/${botAppId}'
      }
    ]
  }
}

output name string = bot.name
